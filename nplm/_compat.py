"""Import paths of the flat package layout, kept working for one release.

``import nplm.corpus`` or ``from nplm.arpa import read_arpa`` still work, with a
DeprecationWarning naming the new module; the old names are proxies that forward
attribute access to the module(s) that now hold them.
"""
import importlib
import importlib.machinery
import sys
import warnings

# old module (under nplm.) -> new module(s), searched in order for each attribute
MOVED = {
    "arpa": ("nplm.backoff.arpa",),
    "tables": ("nplm.backoff.tables",),
    "kneser_ney": ("nplm.backoff.kneser_ney",),
    "corpus": ("nplm.evaluate",),
    "integrity": ("nplm.verify",),
    "memory": ("nplm.io.resources",),
    "textio": ("nplm.io.files", "nplm.io.text", "nplm.io.atomic"),
    "formats": ("nplm.io.container",),
    "formats.container": ("nplm.io.container",),
    "formats.quantize": ("nplm.neural.quantize",),
    "formats.isi": ("nplm.neural.isi",),
    "vocab": ("nplm.neural.vocab",),
    "neural_model": ("nplm.neural.query",),
    "train": ("nplm.neural.train",),
    "clusters": ("nplm.neural.clusters",),
    "sample": ("nplm.neural.sample",),
    "continuation": ("nplm.compose.continuation",),
    "distil": ("nplm.compose.distil",),
    "reproduce": ("nplm.recipes.ptb",),
}


def _warn(old, new):
    warnings.warn(f"nplm.{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)


class _Proxy(type(sys)):
    """A module whose attributes are those of the modules that now hold them (a
    subclass of types.ModuleType, named without importing types: every program's
    start imports this module)."""

    def __init__(self, old, targets):
        super().__init__(f"nplm.{old}")
        self._targets = targets

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        for target in self._targets:
            module = importlib.import_module(target)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __dir__(self):
        return sorted({n for t in self._targets for n in dir(importlib.import_module(t))})


class _Loader:
    # (the loader and finder protocols, without importlib.abc, which costs
    # milliseconds of every program's start-up)
    def create_module(self, spec):
        old = spec.name[len("nplm."):]
        _warn(old, " / ".join(MOVED[old]))
        proxy = _Proxy(old, MOVED[old])
        if old == "formats":
            proxy.__path__ = []     # a package, so nplm.formats.quantize resolves
        return proxy

    def exec_module(self, module):
        pass


def find_spec(fullname):
    """The spec of a flat-layout module name (nplm/__init__.py's finder asks), else None."""
    if fullname.startswith("nplm.") and fullname[len("nplm."):] in MOVED:
        return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=fullname == "nplm.formats")
    return None


def moved_attribute(package, name, targets):
    """``package.name``: a submodule of ``package`` (imported on first use), or a name
    the flat layout's module of that name held and that moved into one of ``targets``
    (a package's module-level __getattr__ calls this)."""
    import importlib.util

    if importlib.util.find_spec(f"{package}.{name}") is not None:
        return importlib.import_module(f"{package}.{name}")
    for target in targets:
        module = importlib.import_module(target)
        if hasattr(module, name):
            _warn(f"{package.rsplit('.', 1)[-1]}.{name}", f"{target}.{name}")
            return getattr(module, name)
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
