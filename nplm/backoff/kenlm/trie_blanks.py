"""KenLM's blank trie entries (lm/search_trie.cc: BlankManager, SRISucks), for models
whose n-grams lack some of their suffixes (SRILM-pruned ARPAs; lmplz's never do).

A trie entry's children are the n-grams extending it to the left, so every n-gram's
suffix (its n - 1 newest words) must be an entry: a missing one becomes a blank.
A blank gets the probability that backing off gives (the probability of its longest
present suffix plus the back-offs of its contexts that exist, added in order of
length), a back-off of +0.0 when a longer blank's computation wanted it as a context
(and it sorts before the order's last real entry: KenLM's merge stops there) and
-0.0 otherwise; every context whose back-off was used, and was -0.0, becomes
+0.0 ("extended").  Rows are reversed n-grams (newest word first), as in trie.py.
"""
import numpy as np

from nplm.backoff.kenlm import _write


def _missing_prefixes(shorter, longer):
    """The sorted distinct prefixes (width of shorter) of the rows of longer that
    shorter lacks."""
    present = _write.prefix_present(shorter, longer)
    if present.all():
        return None
    prefixes = longer[~present, :shorter.shape[1]]
    return np.unique(prefixes, axis=0).astype(np.uint32)


def find_blanks(levels, order):
    """{order: sorted blank rows}, empty when every suffix is present."""
    blanks = {}
    for k in range(order - 1, 1, -1):
        upper = levels[k + 1].rows
        if k + 1 in blanks:
            upper = np.concatenate([upper, blanks[k + 1]])
            upper = upper[np.lexsort(upper.T[::-1])]
        missing = _missing_prefixes(levels[k].rows, np.ascontiguousarray(upper))
        if missing is not None:
            blanks[k] = missing
    return blanks


def _weights(levels, uni, k):
    """(prob, backoff) arrays of the real entries of order k (unigrams by id)."""
    if k == 1:
        return uni["prob"], uni["backoff"]
    return levels[k].prob, levels[k].backoff


def _find(levels, k, rows):
    """Index of each row (k words) among order k's real entries, -1 when absent."""
    if k == 1:
        return rows[:, 0].astype(np.int64)
    return _write.lookup_rows(levels[k].rows, np.ascontiguousarray(rows, dtype=np.uint32))


def add_blanks(levels, uni, order):
    """Give the levels (trie.Level by order, real entries only) KenLM's blank
    entries; returns how many were added."""
    blanks = find_blanks(levels, order)
    values = _blank_values(levels, uni, blanks, order)
    for k, rows in blanks.items():
        merge(levels[k], rows, *values[k], np.uint32(len(uni) - 1))
    return sum(len(rows) for rows in blanks.values())


def _blank_values(levels, uni, blanks, order):  # noqa: C901 - KenLM's blank rules, one case each
    """{order: (prob, backoff)} of the blanks; marks the contexts they use."""
    basis = {}
    for k, rows in blanks.items():
        # the longest real suffix: order j < k whose first j words are an entry
        prob = np.full(len(rows), np.nan, dtype=np.float32)
        based_on = np.zeros(len(rows), dtype=np.int64)
        for j in range(k - 1, 0, -1):
            todo = np.isnan(prob)
            if not todo.any():
                break
            at = _find(levels, j, rows[todo, :j])
            found = np.flatnonzero(todo)[at >= 0]
            prob[found] = _weights(levels, uni, j)[0][at[at >= 0]]
            based_on[found] = j
        basis[k] = (prob, based_on)
    extends = {}
    # contexts' back-offs are added order by order, as KenLM applies its messages
    for i in range(1, order - 1):
        for k, rows in blanks.items():
            prob, based_on = basis[k]
            use = np.flatnonzero((based_on <= i) & (i < k))
            if not len(use):
                continue
            ctx = rows[use, 1:i + 1]
            at = _find(levels, i, ctx)
            backoff = _weights(levels, uni, i)[1]
            # KenLM merges the messages with the sorted entries and stops at the last
            # entry: a missing context after it is not recorded as extended
            last = tuple(levels[i].rows[-1]) if i > 1 and len(levels[i].rows) else ()
            for row, a in zip(use, at):
                if a < 0:
                    if tuple(rows[row, 1:i + 1]) < last:
                        extends.setdefault(i, set()).add(tuple(rows[row, 1:i + 1]))
                elif np.signbit(backoff[a]) and backoff[a] == 0:
                    backoff[a] = 0.0          # -0.0 -> +0.0: extended
                else:
                    prob[row] = np.float32(prob[row] + backoff[a])
    values = {}
    for k, rows in blanks.items():
        marked = extends.get(k, set())
        backoff = np.full(len(rows), -0.0, dtype=np.float32)
        if k != order - 1:
            for r in range(len(rows)):
                if tuple(rows[r]) in marked:
                    backoff[r] = 0.0
        values[k] = (basis[k][0], backoff)
    return values


def merge(level, rows, prob, backoff, bound):
    """Add the blank rows to ``level``, keeping it sorted."""
    all_rows = np.concatenate([level.rows, rows])
    sorted_rows, perm = _write.sort_rows(all_rows, bound)
    level.rows = sorted_rows
    level.prob = np.ascontiguousarray(np.concatenate([level.prob, prob])[perm])
    level.backoff = np.ascontiguousarray(np.concatenate([level.backoff, backoff])[perm])
