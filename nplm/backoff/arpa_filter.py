"""KenLM's filter (lm/filter/): keep the n-grams of an ARPA file or of raw n-gram lines
that a vocabulary allows.  The pass is the C of ``_filter`` (the input mapped or read
whole, the vocabulary's hash set, the kept lines written to file descriptors, all
without the GIL); the ``phrase`` constraint is ``filter_phrase``'s.  No numpy: KenLM's
filter program starts without it.  nplm/cli/kenlm/filter.py is the program."""
from nplm.backoff import filter_phrase
from nplm.backoff._filter import Input, Vocabulary, run

__all__ = ["Input", "Vocabulary", "run", "phrase_decisions"]


def phrase_decisions(model, text, context, arpa, multiple):
    """The phrase constraint (union, or ``multiple``): the model's n-grams read by the
    kernel (``collect``), tested against the phrases of the vocabulary's bytes
    ``text``.  Returns (decisions, sentences) for run's ``decided`` mode, or the
    kernel's error tuple."""
    table, sentences = filter_phrase.read_phrases(text)
    ngrams = run(model, None, "collect", context, arpa, [], [])
    if not isinstance(ngrams, bytes):
        return ngrams
    return filter_phrase.decisions(table, ngrams, sentences, multiple), sentences
