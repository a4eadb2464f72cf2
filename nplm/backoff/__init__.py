"""Back-off n-gram models: ARPA files, the n-gram tables and their query engine,
nplm's binary files, KenLM's binary files, and Kneser-Ney estimation."""
from nplm._compat import moved_attribute


def __getattr__(name):      # a submodule not imported yet, or a name of the flat layout's nplm.backoff
    return moved_attribute(__name__, name, ("nplm.backoff.binary",))
