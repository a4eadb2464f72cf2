"""Write the ``.pyi`` stubs of nplm's extension modules from the built modules.

Cython embeds each function's signature in its docstring (the ``embedsignature``
directives in setup.py); this turns those signatures into stubs: memoryview
arguments are ``numpy.ndarray``, C scalars their Python type, anything else ``Any``.

    python tools/make_stubs.py          # rewrite nplm/**/_*.pyi
    python tools/make_stubs.py --check  # exit 1 if a stub is out of date
"""
import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCALARS = {"int": "int", "float": "float", "double": "float", "bint": "bool", "bool": "bool", "str": "str",
           "bytes": "bytes", "object": "Any", "list": "list", "dict": "dict", "tuple": "tuple"}
SIGNATURE = re.compile(r"^(\w+)\((.*)\)(?:\s*->\s*(.+))?$")


def _split_params(text):
    depth, cur, out = 0, "", []
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _annotation(c_type):
    c_type = c_type.strip()
    if "[" in c_type:
        return "np.ndarray"
    return SCALARS.get(c_type.removeprefix("const_").removeprefix("const "), "Any")


def _param(text):
    if text in ("self", "cls") or text.startswith("*"):
        return text.split(":")[0] if not text.startswith("*") else text.split(":")[0] + ": Any"
    default = None
    if "=" in text:
        text, default = (s.strip() for s in text.split("=", 1))
    name, _, c_type = text.partition(":")
    out = f"{name.strip()}: {_annotation(c_type) if c_type else 'Any'}"
    return out + (" = ..." if default is not None else "")


def _signature(name, obj, method=False):
    doc = (getattr(obj, "__doc__", None) or "").strip().split("\n", 1)[0]
    m = SIGNATURE.match(doc)
    if m and m.group(1) == name:
        params = [_param(p) for p in _split_params(m.group(2))]
        ret = _annotation(m.group(3)) if m.group(3) else "Any"
    else:
        params, ret = ["*args: Any", "**kwargs: Any"], "Any"
    if method and (not params or params[0] != "self"):
        params.insert(0, "self")
    return f"def {name}({', '.join(params)}) -> {ret}: ..."


def _class_stub(name, cls):
    lines = [f"class {name}{'(' + cls.__base__.__name__ + ')' if cls.__base__ is not object else ''}:"]
    body = []
    for attr, value in sorted(vars(cls).items()):
        if attr.startswith("_") and attr not in ("__init__", "__call__", "__iter__", "__len__", "__contains__",
                                                 "__getitem__", "__eq__", "__hash__"):
            continue
        if inspect.isroutine(value):
            body.append("    " + _signature(attr, value, method=True))
        elif isinstance(value, (property, type(type.__dict__["__name__"]))) or inspect.isdatadescriptor(value):
            body.append(f"    {attr}: Any")
        elif isinstance(value, (int, float, str)):
            body.append(f"    {attr}: {type(value).__name__}")
    return "\n".join(lines + (body or ["    ..."]))


def stub(module_name):
    module = importlib.import_module(module_name)
    names = sorted(n for n in vars(module) if not n.startswith("_"))
    bases = sorted({(v.__base__.__module__, v.__base__.__name__) for v in vars(module).values()
                    if inspect.isclass(v) and v.__module__ == module_name
                    and v.__base__.__module__ not in (module_name, "builtins")})
    out = []
    for n in names:
        v = getattr(module, n)
        if inspect.isclass(v) and v.__module__ == module_name:
            out += ["", _class_stub(n, v), ""]
        elif inspect.isroutine(v):
            out.append(_signature(n, v))
        elif isinstance(v, (int, float, str, bytes, tuple, dict, list)):
            out.append(f"{n}: {type(v).__name__}")
    body = "\n".join(out).rstrip() + "\n"
    # The imports in ruff's order, and only those the body uses, so that `ruff --fix`
    # leaves written stubs unchanged.
    head = [f'"""Type stubs of the extension module {module_name} (written by tools/make_stubs.py)."""',
            *(["from typing import Any", ""] if "Any" in body else [])]
    if "np." in body:
        head += ["import numpy as np", ""]
    if bases:
        head += [f"from {m} import {', '.join(sorted(b for mm, b in bases if mm == m))}"
                 for m in sorted({m for m, _ in bases})] + [""]
    return "\n".join(head) + "\n" + body


def extension_modules():
    return sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "nplm").rglob("*.pyx"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="report out-of-date stubs instead of writing them")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    stale = []
    for name in extension_modules():
        path = ROOT / (name.replace(".", "/") + ".pyi")
        text = stub(name)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path.relative_to(ROOT)))
        else:
            path.write_text(text)
    if stale:
        print("out-of-date stubs (run python tools/make_stubs.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
