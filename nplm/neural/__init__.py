"""Feed-forward neural n-gram models: vocabulary, network, training, query engines
and normalisation, word classes and trees, sampling, quantisation, the ISI format."""
from nplm._compat import moved_attribute


def __getattr__(name):      # a submodule not imported yet, or a name of the flat layout's nplm.neural
    return moved_attribute(__name__, name, ("nplm.neural.network",))
