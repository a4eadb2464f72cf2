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

from nplm import _compat
from nplm._kernels import FullScoreReturn, State, Vocab
from nplm.backoff import arpa
from nplm.backoff import binary as backoff
from nplm.backoff.kneser_ney import estimate
from nplm.compose.interpolate import InterpolatedModel, interpolate
from nplm.errors import FormatError, ModelLoadError
from nplm.model import ARPALoadComplain, Config, LanguageModel, LoadMethod, Model

__version__ = "0.1.0"

__all__ = ["Model", "LanguageModel", "State", "Config", "FullScoreReturn", "LoadMethod",
           "ARPALoadComplain", "Vocab", "FormatError", "ModelLoadError", "build_binary", "estimate",
           "interpolate", "InterpolatedModel", "install_as_kenlm"]


# The flat layout's module names (nplm.corpus, nplm.arpa, ...) keep working, deprecated.
_compat.install()


def __getattr__(name):
    if name in _compat.MOVED:
        return importlib.import_module(f"nplm.{name}")
    if name in _SUBPACKAGES:
        return importlib.import_module(f"nplm.{name}")
    raise AttributeError(f"module 'nplm' has no attribute {name!r}")


_SUBPACKAGES = ("backoff", "cli", "compose", "convert", "evaluate", "io", "neural", "recipes", "verify")


def build_binary(arpa_path, out_path):
    """Convert an ARPA file (plain or compressed) to an nplm binary (atomically)."""
    backoff.build_binary(arpa.read_arpa(arpa_path), out_path)


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
