"""Feed-forward neural n-gram models: vocabulary, network, training, query engines
and normalisation, word classes and trees, sampling, quantisation, the ISI format."""
import importlib


def __getattr__(name):      # a submodule not imported yet, or a name of the flat layout's nplm.neural
    return importlib.import_module("nplm._compat").moved_attribute(__name__, name, ("nplm.neural.network",))
