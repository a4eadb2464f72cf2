"""nplm: neural and Kneser-Ney n-gram language models behind the kenlm Python API.

``import nplm as kenlm`` works in scripts written for the ``kenlm`` module.
All probabilities are log10.
"""
import importlib
import os as _os
import sys as _sys

# Idle OpenMP threads of the kernels should sleep, not spin on the other core; this
# must be set before the first kernel loads the OpenMP runtime.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# ``import nplm`` imports nothing heavy: the kenlm API's names (Model, State, ...)
# import nplm.model and the query kernels (and with them numpy) on first use, and
# estimation, interpolation, rescoring and the writers likewise.  A worker process
# that scores with one KenLM binary holds the query path only; KenLM's query program
# under its own name (nplm.cli.kenlm.query) scores a KenLM binary with neither numpy
# nor the kernels, as its whole run must be as short as KenLM's.  scipy's BLAS loads
# with the first neural model or training run (nplm.neural._blas).
from nplm.errors import FormatError, ModelLoadError

__version__ = "0.1.0"

__all__ = ["Model", "LanguageModel", "State", "Config", "FullScoreReturn", "LoadMethod",
           "ARPALoadComplain", "Vocab", "FormatError", "ModelLoadError", "build_binary", "estimate",
           "interpolate", "InterpolatedModel", "rescore", "install_as_kenlm"]


class _MovedModules:
    """The flat layout's module names (nplm.corpus, nplm.arpa, ...) keep working,
    deprecated (nplm._compat).  Last on sys.meta_path, this finder is asked only about
    names that no file holds, so that nplm._compat is imported only then, not at every
    program's start."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname.startswith("nplm."):
            return importlib.import_module("nplm._compat").find_spec(fullname)
        return None


if not any(isinstance(f, _MovedModules) for f in _sys.meta_path):
    _sys.meta_path.append(_MovedModules())


_LAZY = {"Model": "nplm.model", "LanguageModel": "nplm.model", "Config": "nplm.model", "LoadMethod": "nplm.model",
         "ARPALoadComplain": "nplm.model", "State": "nplm._kernels", "FullScoreReturn": "nplm._kernels",
         "Vocab": "nplm._kernels", "estimate": "nplm.backoff.kneser_ney", "interpolate": "nplm.compose.interpolate",
         "InterpolatedModel": "nplm.compose.interpolate", "rescore": "nplm.compose.rescore"}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    # (no flat-layout name is private: ``from nplm import _kernels`` leaves _compat alone)
    if name in _SUBPACKAGES or not name.startswith("_") and name in importlib.import_module("nplm._compat").MOVED:
        return importlib.import_module(f"nplm.{name}")
    raise AttributeError(f"module 'nplm' has no attribute {name!r}")


_SUBPACKAGES = ("backoff", "cli", "compose", "convert", "evaluate", "io", "neural", "recipes", "verify")


def build_binary(arpa_path, out_path, type=None, **options):
    """Convert an ARPA file (plain or compressed) to a binary model, atomically:
    ``type="probing"`` or ``"trie"`` writes KenLM's format exactly as its build_binary
    does, with its options as keywords (multiplier=-p, prob_bits=-q, backoff_bits=-b,
    pointer_bits=-a, include_vocab=False for -v, unknown_logprob=-u,
    allow_missing_markers=True for -s); ``"nplm"`` writes nplm's own format.  With no
    type, an output named ``*.nplm`` gets nplm's format and any other name KenLM's
    probing format (build_binary's default).  Returns the type written."""
    write = importlib.import_module("nplm.backoff.kenlm.write")
    return write.build_binary_from_arpa(arpa_path, out_path, type, **options)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def install_as_kenlm():
    """Register nplm as the ``kenlm`` module, for programs that import kenlm themselves.

    After the call, ``import kenlm`` anywhere in the process gives nplm, so libraries
    such as pyctcdecode or datatrove use nplm's models (the convention of
    ``pymysql.install_as_MySQLdb()``). Call it before importing such a library: a
    module that imported the real ``kenlm`` earlier keeps it.

    Examples
    --------
    >>> import nplm
    >>> nplm.install_as_kenlm()
    >>> import kenlm
    >>> kenlm is nplm
    True
    """
    _sys.modules["kenlm"] = _sys.modules[__name__]
