"""The .pyi stubs of the extension modules name every public function and class the
built module has (tools/make_stubs.py writes them from the modules' signatures)."""
import ast
import importlib
import inspect
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from make_stubs import extension_modules  # noqa: E402


@pytest.mark.parametrize("name", extension_modules())
def test_stub_lists_every_public_name(name):
    path = ROOT / (name.replace(".", "/") + ".pyi")
    assert path.exists(), f"{path} is missing: run python tools/make_stubs.py"
    tree = ast.parse(path.read_text())
    in_stub = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    module = importlib.import_module(name)
    public = {n for n, v in vars(module).items() if not n.startswith("_")
              and (inspect.isroutine(v) or (inspect.isclass(v) and v.__module__ == name))}
    assert public <= in_stub, f"{path.name} lacks {sorted(public - in_stub)}: run python tools/make_stubs.py"


def test_package_is_typed():
    assert (ROOT / "nplm" / "py.typed").exists()
