"""nplm: neural and Kneser-Ney n-gram language models behind the kenlm Python API.

``import nplm as kenlm`` works in scripts written for the ``kenlm`` module.
All probabilities are log10.
"""
import os as _os

# Idle OpenMP threads of the kernels should sleep, not spin on the other core; this
# must be set before the first kernel loads the OpenMP runtime.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from ._kernels import FullScoreReturn, State, Vocab
from .errors import FormatError, ModelLoadError
from .kneser_ney import estimate
from .model import ARPALoadComplain, Config, LanguageModel, LoadMethod, Model
from .interpolate import InterpolatedModel, interpolate

__version__ = "0.1.0"

__all__ = ["Model", "LanguageModel", "State", "Config", "FullScoreReturn", "LoadMethod",
           "ARPALoadComplain", "Vocab", "FormatError", "ModelLoadError", "build_binary", "estimate",
           "interpolate", "InterpolatedModel"]


# Submodules the README names as ``nplm.corpus.evaluate`` etc., imported on first use
# (PEP 562): ``import nplm`` loads only what the kenlm API needs.
_SUBMODULES = ("arpa", "backoff", "clusters", "continuation", "convert", "corpus", "distil",
               "integrity", "kneser_ney", "neural", "neural_model", "sample", "tables", "textio",
               "train", "vocab")


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'nplm' has no attribute {name!r}")


def build_binary(arpa_path, out_path):
    """Convert an ARPA file (plain or compressed) to an nplm binary (atomically)."""
    from . import arpa, backoff
    backoff.build_binary(arpa.read_arpa(arpa_path), out_path)
