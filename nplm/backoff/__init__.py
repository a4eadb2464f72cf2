"""Back-off n-gram models: ARPA files, the n-gram tables and their query engine,
nplm's binary files, KenLM's binary files, and Kneser-Ney estimation."""
import importlib


def __getattr__(name):      # a submodule not imported yet, or a name of the flat layout's nplm.backoff
    return importlib.import_module("nplm._compat").moved_attribute(__name__, name, ("nplm.backoff.binary",))
