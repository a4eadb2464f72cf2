"""Stage 2, adjusting: every order's n-grams, adjusted (continuation) counts,
suffix links and pruning marks, from the suffix-sorted highest-order counts.

``adjust`` runs on all the n-grams at once (the in-memory estimation) or on one
part of them, those whose last word lies in a range of ids (the partitioned
estimation): in suffix order every n-gram that a part's n-grams imply ends in the
same range, so parts are independent except for the unigram arrays they share.
"""
import dataclasses

import numpy as np

from nplm.backoff import _kn


@dataclasses.dataclass
class Adjusted:
    """Per order (index k-1): n-grams (None for unigrams: they are word ids),
    adjusted counts (order N: raw counts), suffix links into order k-1 (for bigrams,
    the word id), pruning marks; ``sizes`` counts every order's n-grams."""
    words: list
    adj: list
    parent: list
    mark: list
    sizes: list
    last_raw: int = 0


def adjust(keys, counts, config, prune_word, stats, adj1, mark1, last_part=True, unigrams=True):
    """Run ``_kn.adjust`` on suffix-sorted ``keys``/``counts``, which it consumes:
    the highest order is compacted into them.  ``adj1``/``mark1`` are the unigram
    arrays (V,), zeroed before the first part; ``stats`` (N, 7) accumulates."""
    order = config.order
    sizes = _kn.adjust_sizes(keys)
    sizes[0] = len(adj1)
    if max(sizes) >= 2 ** 31:
        raise MemoryError(f"{max(sizes)} n-grams of one order exceed nplm's 32-bit indices")
    if order == 1:
        words, adj, parent, mark = [None], [adj1], [None], [mark1]
    else:
        # Orders 2..N-1 get fresh arrays; order N is compacted into keys/counts.
        words = [None] + [np.empty((sizes[k - 1], k), dtype=np.int32) for k in range(2, order)] + [None]
        adj = [adj1] + [np.zeros(s, dtype=np.uint64) for s in sizes[1:-1]] + [None]
        parent = [None] + [np.empty(sizes[k - 1], dtype=np.int32) for k in range(2, order + 1)]
        mark = [mark1] + [np.zeros(s, dtype=np.uint8) for s in sizes[1:]]
    last_raw = _kn.adjust(keys, counts, words, adj, parent, mark, config.thresholds, prune_word,
                          config.limit_vocab_file is not None, stats, last_part, unigrams)
    if order > 1:
        words[-1] = keys.view(np.int32)[:sizes[-1]]
        adj[-1] = counts[:sizes[-1]]
    return Adjusted(words, adj, parent, mark, sizes, int(last_raw))
