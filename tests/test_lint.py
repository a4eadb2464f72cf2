"""The source passes the linters configured in pyproject.toml: ruff (pycodestyle,
pyflakes, import order, bugbear, McCabe complexity) over the Python, and cython-lint
over the kernels."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args):
    # cython-lint runs pycodestyle as a program: the interpreter's bin directory
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, env=env)


def test_ruff():
    r = _run("ruff", "check", "--no-cache", "--output-format", "concise", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_cython_lint():
    kernels = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "nplm").rglob("*.p[yx]*")
                     if p.suffix in (".pyx", ".pxd"))
    r = _run("cython_lint.cython_lint", *kernels)
    assert r.returncode == 0, r.stdout + r.stderr
