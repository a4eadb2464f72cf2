"""nplm: neural and Kneser-Ney n-gram language models behind the kenlm Python API.

``import nplm as kenlm`` works in scripts written for the ``kenlm`` module.
All probabilities are log10.
"""
__version__ = "0.1.0"
