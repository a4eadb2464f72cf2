"""KenLM's filter (lm/filter/): keep the n-grams of an ARPA file or of raw n-gram lines
that a vocabulary allows.  The pass is the C of ``_filter`` (the input mapped or read
whole, the vocabulary's hash set or the phrase constraint's table of substrings, the
kept lines written to file descriptors, all without the GIL).  No numpy: KenLM's
filter program starts without it.  nplm/cli/kenlm/filter.py is the program."""
from nplm.backoff._filter import Input, Phrases, Vocabulary, run

__all__ = ["Input", "Phrases", "Vocabulary", "run"]
