"""The shortlist output layer (Schwenk 2007; Zamora-Martinez et al., Fallback V-NNLM
section 3.2): the network predicts only the most frequent words, plus one
out-of-shortlist (OOS) unit whose probability is shared among the other words in
proportion to their training counts::

    p(w | h) = p_net(w | h)                                 w in the shortlist
    p(w | h) = p_net(OOS | h) * c(w) / sum_{v in OOS} c(v)  otherwise

(p_unigram(w) / p_unigram(OOS set), the unigram counted on the training text: its total
cancels.)  The model's vocabulary stays the whole training vocabulary; only the network
is smaller.  Its units, in this order:

* the four specials, at their own ids: ``<unk>`` (its count holds every training word
  outside the vocabulary) and ``</s>`` are always predicted directly, never split;
  ``<s>`` and ``<null>`` are never predicted (no count) but keep their units, as in a
  network without a shortlist;
* the N regular words of highest training count (ties: the lower id), in id order;
* the OOS unit.

The OOS set is every other regular word; each needs a training count (a vocabulary
built from the text always has one).  With ``inputs`` the context side is mapped the
same way (an OOS word in the context is the OOS unit's embedding), else the network
reads every word's own embedding.

Everything here is derived from the vocabulary's words and counts and the two
settings, so a saved model (which stores those) rebuilds the same arrays bit for bit.
"""
import numpy as np

from nplm.neural.vocab import SPECIALS


class Shortlist:
    """The map from a vocabulary's words to a network's units.

    ``out_map`` (V,) int32: each word's output unit; ``in_map`` (V,) int32: each word's
    input row (None: the word's own id); ``log_ratio`` (V,) float64: ln(c(w) / c(OOS
    set)) for an OOS word, 0 for the others; ``unit_words`` (n_units,) int32: the word
    of each unit, -1 for the OOS unit; ``unit_counts`` (n_units,) int64: training counts
    per unit (the OOS unit's is the set's total); ``oos_words`` (K,) int32: the OOS
    set, in id order."""

    def __init__(self, vocab, size, inputs=False):
        V, S = len(vocab), len(SPECIALS)
        counts = np.asarray(vocab.counts, np.int64)
        regular = V - S
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"shortlist size must be a positive number of words, not {size!r}")
        if size >= regular:
            raise ValueError(f"a shortlist of {size} words covers the whole vocabulary of {regular} words "
                             "(specials aside): leave the shortlist out, or make it smaller")
        ids = np.arange(S, V)
        ranked = ids[np.lexsort((ids, -counts[S:]))]         # decreasing count, ties by id
        kept = np.sort(ranked[:size]).astype(np.int32)
        self.oos_words = np.sort(ranked[size:]).astype(np.int32)
        oos_counts = counts[self.oos_words]
        if np.any(oos_counts <= 0):
            w = vocab.words[int(self.oos_words[np.flatnonzero(oos_counts <= 0)[0]])]
            raise ValueError(f"the shortlist's unigram needs a training count for every word outside it; "
                             f"{w!r} has none")
        self.size = int(size)
        self.inputs = bool(inputs)
        self.n_units = S + self.size + 1
        self.oos_unit = self.n_units - 1
        self.unit_words = np.concatenate([np.arange(S, dtype=np.int32), kept, [-1]]).astype(np.int32)
        out_map = np.full(V, self.oos_unit, np.int32)
        out_map[self.unit_words[:-1]] = np.arange(self.n_units - 1, dtype=np.int32)
        self.out_map = out_map
        self.in_map = out_map if self.inputs else None
        self.n_inputs = self.n_units if self.inputs else V
        total = float(oos_counts.sum())
        self.log_ratio = np.zeros(V, np.float64)
        self.log_ratio[self.oos_words] = np.log(oos_counts.astype(np.float64)) - np.log(total)
        self.unit_counts = np.concatenate([counts[self.unit_words[:-1]], [int(oos_counts.sum())]]).astype(np.int64)
        self._oos_cdf = np.cumsum(oos_counts.astype(np.float64)) / total
        for a in (self.out_map, self.log_ratio, self.unit_words, self.unit_counts, self.oos_words):
            a.setflags(write=False)

    @classmethod
    def of(cls, config, vocab):
        """The shortlist of a NeuralConfig over ``vocab``, or None without one."""
        if not config.shortlist:
            return None
        return cls(vocab, config.shortlist, config.shortlist_input)

    def inputs_of(self, ids):
        """Input rows of word ids (any shape)."""
        return ids if self.in_map is None else self.in_map[ids]

    def words_of(self, units, rng):
        """Word ids for output units (1-d): a unit's own word, or for the OOS unit a word
        drawn from the OOS set's unigram (by ``rng``), so that a unit drawn from the
        network's distribution gives a word drawn from the model's."""
        units = np.asarray(units)
        words = self.unit_words[units]
        oos = np.flatnonzero(units == self.oos_unit)
        if oos.size:
            pick = np.searchsorted(self._oos_cdf, rng.random(oos.size), side="right")
            words[oos] = self.oos_words[np.minimum(pick, self.oos_words.size - 1)]
        return words

    def word_scores(self, unit_scores, scale=1.0, dtype=np.float32):
        """(N, V) scores of the words from (N, n_units) natural-log scores of the units:
        each OOS word gets its unit's score plus its log-ratio; all times ``scale``."""
        unit_scores = np.asarray(unit_scores, np.float64)
        out = unit_scores[:, self.out_map]
        out += self.log_ratio
        if scale != 1.0:
            out *= scale
        return out.astype(dtype, copy=False)
