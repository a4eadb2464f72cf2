"""The package's layers, checked over the source: imports go one way (cli -> recipes ->
top-level API -> compose -> model -> backoff / neural -> io -> shared kernels), no
import cycles, no reaching into another module's private names, and imports at the
top of modules except for optional dependencies."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nplm"

# Lowest first.  A module may import modules of its own group or of lower groups;
# the groups of one layer (back-off and neural models) do not import each other.
LAYERS = [
    [("nplm._kernels", "nplm._hashing", "nplm._threads", "nplm.errors", "nplm._compat")],
    [("nplm.io",)],
    [("nplm.backoff",), ("nplm.neural",)],
    [("nplm.model", "nplm.evaluate", "nplm.query_summary")],
    [("nplm.compose",)],
    [("nplm", "nplm.convert", "nplm.verify", "nplm.kenlm_shim")],
    [("nplm.recipes",)],
    [("nplm.cli", "nplm.__main__")],
]
# Imported inside functions on purpose: optional extras, POSIX-only modules.
OPTIONAL = {"matplotlib", "dask", "distributed", "kenlm", "resource"}


def _modules():
    mods = {}
    for path in PACKAGE.rglob("*"):
        if path.suffix not in (".py", ".pyx") or "build" in path.parts:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


MODULES = _modules()


def _group(module):
    """(layer index, group index) of ``module``: the longest matching prefix."""
    best = None
    for li, groups in enumerate(LAYERS):
        for gi, prefixes in enumerate(groups):
            for p in prefixes:
                if module == p or (p != "nplm" and module.startswith(p + ".")):
                    if best is None or len(p) > best[0]:
                        best = (len(p), li, gi)
    assert best is not None, f"{module} belongs to no layer: add it to LAYERS"
    return best[1:]


def _from_base(importer, node):
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base[:len(base) - node.level + (MODULES[importer].name == "__init__.py")]
    return ".".join(base + ([node.module] if node.module else []))


def _resolve(importer, node):
    """Names of nplm modules an import statement of ``importer`` loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        module = _from_base(importer, node)
        names = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]
    out = []
    for n in names:
        while n not in MODULES and "." in n:
            n = n.rsplit(".", 1)[0]
        if n in MODULES and n != importer:
            out.append(n)
    return out


def _imports(module):
    path = MODULES[module]
    if path.suffix != ".py":
        return []
    tree = ast.parse(path.read_text(), str(path))
    return [(node, target) for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
            for target in _resolve(module, node)]


GRAPH = {m: {t for _, t in _imports(m)} for m in MODULES}


def test_imports_follow_the_layers():
    bad = []
    for module, targets in GRAPH.items():
        layer, group = _group(module)
        for t in targets:
            tl, tg = _group(t)
            if tl > layer or (tl == layer and tg != group):
                bad.append(f"{module} imports {t}")
    assert not bad, "layer violations:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):       # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def _package_of(module):
    return module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]


SHARED_PRIVATE = {"nplm._kernels", "nplm._compat"}


def test_no_private_names_of_other_modules():
    """A private module is imported only by its own subpackage (kernels beside their
    Python) unless it is shared on purpose; another module's private function or
    constant never."""
    bad = []
    for module, path in MODULES.items():
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _from_base(module, node)
            for alias in node.names:
                name = alias.name
                if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
                    continue
                full = f"{base}.{name}"
                own = _package_of(module) == base or _package_of(module).startswith(base + ".")
                if full in MODULES and (full in SHARED_PRIVATE or own):
                    continue
                bad.append(f"{module}: from {base} import {name}")
    assert not bad, "\n".join(bad)


def test_imports_at_module_top():
    bad = []
    for _module, path in MODULES.items():
        if path.suffix != ".py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Import):
                    roots = {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    roots = {(node.module or "").split(".")[0]} if not node.level else {"nplm"}
                else:
                    continue
                if not roots <= OPTIONAL and "importlib" not in roots:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not bad, "imports inside functions:\n" + "\n".join(bad)


@pytest.mark.parametrize("violation", ["from nplm.compose import interpolate", "import nplm.cli.main"])
def test_a_layer_violation_is_caught(violation):
    """The check itself: a low module importing a high one is reported."""
    tree = ast.parse(violation)
    targets = _resolve("nplm.io.files", tree.body[0])
    layer = _group("nplm.io.files")[0]
    assert any(_group(t)[0] > layer for t in targets)


def _code_lines(func):
    """Lines of a function, its docstring left out."""
    n = func.end_lineno - func.lineno + 1
    first = func.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        n -= first.end_lineno - first.lineno + 1
    return n


def test_long_functions_say_why():
    """A function of more than 60 lines (docstring aside) carries its reason on the
    ``def`` line: ``# noqa: C901 - why`` or ``# long: why``."""
    bad = []
    for path in PACKAGE.rglob("*.py"):
        source = path.read_text()
        lines = source.split("\n")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(node) > 60:
                line = lines[node.lineno - 1]
                if "# long: " not in line and "# noqa: C901 - " not in line:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({_code_lines(node)} lines)")
    assert not bad, "long functions without a reason:\n" + "\n".join(bad)
