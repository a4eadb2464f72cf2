"""Every shell and Python block of README.md and the documentation runs as pasted.

Each page's blocks run in order in one temporary directory holding a copy of
``examples/`` (and ``../shared`` beside it when the clone has one), so a block may use
the files an earlier block of its page wrote. An HTML comment on the line before a
block marks what it needs:

* ``<!-- doc-test: skip (reason) -->``: never run here (it installs the package,
  downloads, or needs a program nplm does not depend on); the reason is required;
* ``<!-- doc-test: needs-shared -->``: runs only where ``../shared`` exists;
* ``<!-- doc-test: long -->``: runs only with ``NPLM_DOC_LONG=1`` (minutes).

Blocks fenced as ``text`` are synopses and never run.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
RUNNABLE = {"bash": "shell", "sh": "shell", "shell": "shell", "python": "python", "py": "python"}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARK = re.compile(r"<!--\s*doc-test:\s*(.*?)\s*-->\s*\n\s*$", re.S)
BLOCK_TIMEOUT = 600


def pages():
    found = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
    return [p for p in found if "_build" not in p.parts]


def blocks(page):
    """(kind, code, mark, line) of every runnable block of ``page``."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        kind = RUNNABLE.get(m.group(1).lower())
        if kind is None:
            continue
        before = text[:m.start()]
        mark = MARK.search(before[-300:])
        out.append((kind, m.group(2), mark.group(1) if mark else "", before.count("\n") + 1))
    return out


def why_not_run(mark):
    """The reason a block is not run here, or None."""
    if mark.startswith("skip"):
        reason = mark[len("skip"):].strip(" ()")
        assert reason, "a skipped doc block must say why: <!-- doc-test: skip (reason) -->"
        return reason
    words = set(mark.split())
    unknown = words - {"needs-shared", "long"}
    assert not unknown, f"unknown doc-test marks {unknown}"
    if "needs-shared" in words and not SHARED.is_dir():
        return "../shared is absent"
    if "long" in words and os.environ.get("NPLM_DOC_LONG") != "1":
        return "a long run (NPLM_DOC_LONG=1 runs it)"
    return None


def _environment(tmp):
    """PATH with ``nplm``, ``python`` and KenLM's program names as this interpreter and
    this tree's package."""
    from nplm.cli.kenlm import PROGRAMS
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    programs = [(name, f'exec "{sys.executable}" -m {module} "$@"\n') for name, module in PROGRAMS.items()]
    for name, body in [("nplm", f'exec "{sys.executable}" -m nplm "$@"\n'),
                       ("python", f'exec "{sys.executable}" "$@"\n')] + programs:
        shim = bin_dir / name
        shim.write_text("#!/bin/sh\n" + body)
        shim.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("NPLM_SIMD", None)
    return env


def _workdir(tmp):
    work = tmp / "work"
    shutil.copytree(ROOT / "examples", work / "examples")
    if SHARED.is_dir():
        (tmp / "shared").symlink_to(SHARED)     # ../shared from the working directory
    return work


def _run(kind, code, work, env):
    if kind == "python":
        script = work / "_doc_block.py"
        script.write_text(code)
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", code]
    return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_page_examples_run(page, tmp_path):
    found = blocks(page)
    if not found:
        pytest.skip("no shell or Python blocks")
    work, env = _workdir(tmp_path), _environment(tmp_path)
    skipped = []
    for kind, code, mark, line in found:
        reason = why_not_run(mark)
        if reason is not None:
            skipped.append(f"line {line}: {reason}")
            continue
        done = _run(kind, code, work, env)
        assert done.returncode == 0, (
            f"{page.relative_to(ROOT)}:{line}: the {kind} block failed (exit {done.returncode})\n"
            f"--- block\n{code}--- stdout\n{done.stdout[-3000:]}--- stderr\n{done.stderr[-3000:]}")
    if len(skipped) == len(found):
        pytest.skip("; ".join(skipped))


def test_readme_test_command_is_the_ci_command():
    """CI runs README's test command: the README must keep one that CI can run."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pytest -q tests" in readme
    ci = ROOT / ".ci" / "run"
    if ci.exists():
        assert "pytest -q tests" in ci.read_text(encoding="utf-8")


def test_marks_are_well_formed():
    for page in pages():
        for _, _, mark, _line in blocks(page):
            if mark:
                why_not_run(mark)     # raises on an unknown or reason-less mark
