"""The listed n-grams of a distilled table, their back-off weights, and relative-entropy
pruning (the numeric stages of nplm/compose/distil.py).

A ``Structure`` holds orders 1..N as sorted flat arrays of teacher word ids; no Python
object per n-gram.  Back-off weights make every context's distribution sum to one:

    bow(h) = (1 - sum_listed p(w | h)) / (1 - sum_listed p_lower(w | h'))

with p_lower the table's own (listed, by the suffix closure) lower-order probability.
Relative-entropy pruning (Stolcke 1998) removes the n-grams whose removal changes the
model least, D = P(h) [p log(p / p') + (1 - sum_listed p(.|h)) log(bow / bow')],
keeping every n-gram that is the context or the lower-order n-gram of a kept one; the
threshold is given, or found by bisection so the table meets a target n-gram count.
D measures the change of the context's own distribution (Stolcke's approximation, as
SRILM): a longer context that backs off through h is not counted.  D of order n
depends on orders 1..n only, so one pass scoring every order equals SRILM's pruning
of the highest order first.  P(h) is
the table's own chain-rule probability of h, with P(<s>) taken as the unigram
probability of </s> (one sentence start per sentence end).
"""
import math

import numpy as np

from nplm.backoff.tables import chain_log10P

EPS = 1e-7          # probability mass kept back for unlisted words
MIN_DEN = 1e-12     # smallest back-off denominator (lower-order mass left)


def unique_sorted(a):
    """Sorted unique values (np.unique's hash path is slow on tens of millions)."""
    a = np.sort(a)
    if len(a) == 0:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


class Structure:
    """Listed n-grams of orders 1..N in teacher word ids.

    Order n's n-grams are sorted by ``keys[n] = prefix[n] * V + word[n]`` where
    ``prefix[n]`` is the index of the n-gram's first n-1 words in order n-1 and
    ``suffix[n]`` the index of its last n-1 words in order n-1.  Order 1 is the
    whole vocabulary (index = word id)."""

    def __init__(self, V, order):
        self.V = V
        self.order = order
        self.keys = {}
        self.prefix = {}
        self.word = {}
        self.suffix = {}

    def count(self, n):
        return self.V if n == 1 else len(self.keys[n])

    def rows(self, n):
        """(count, n) int32 word ids, oldest first."""
        if n == 1:
            return np.arange(self.V, dtype=np.int32)[:, None]
        lower = self.rows(n - 1)
        return np.ascontiguousarray(np.column_stack([lower[self.prefix[n]], self.word[n]]), dtype=np.int32)

    def index(self, rows):
        """Index of each row (oldest first) in its order's table, -1 where absent."""
        rows = np.asarray(rows)
        idx = rows[:, 0].astype(np.int64)
        ok = np.ones(len(idx), dtype=bool)
        for k in range(1, rows.shape[1]):
            table = self.keys[k + 1]
            if len(table) == 0:
                return np.full(len(idx), -1, np.int64)
            key = idx * self.V + rows[:, k]
            pos = np.minimum(np.searchsorted(table, key), len(table) - 1)
            ok &= table[pos] == key
            idx = np.where(ok, pos, 0)
        return np.where(ok, idx, -1)


def build_structure(V, rows_by_order):
    """A Structure from row arrays per order (n >= 2; duplicates allowed).  The rows
    are closed under prefixes and suffixes first."""
    order = max([1] + [n for n, r in rows_by_order.items() if len(r)])
    rows = {n: [np.asarray(rows_by_order.get(n, np.zeros((0, n), np.int32)), dtype=np.int32).reshape(-1, n)]
            for n in range(2, order + 1)}
    for n in range(order, 2, -1):
        r = np.concatenate(rows[n])
        rows[n] = [r]
        rows[n - 1] += [r[:, :-1], r[:, 1:]]
    s = Structure(V, order)
    for n in range(2, order + 1):
        r = np.concatenate(rows[n])
        if n == 2:
            pidx = r[:, 0].astype(np.int64)
        else:
            pidx = s.index(r[:, :-1])
            assert (pidx >= 0).all(), "prefix closure violated"
        keys = unique_sorted(pidx * V + r[:, -1])
        s.keys[n] = keys
        s.prefix[n] = keys // V
        s.word[n] = (keys % V).astype(np.int32)
        if n == 2:
            s.suffix[n] = s.word[n].astype(np.int64)
        else:
            skey = s.suffix[n - 1][s.prefix[n]] * V + s.word[n]
            spos = np.searchsorted(s.keys[n - 1], skey)
            assert np.array_equal(s.keys[n - 1][np.minimum(spos, len(s.keys[n - 1]) - 1)], skey), \
                "suffix closure violated"
            s.suffix[n] = spos
    return s


def compute_backoffs(s, logprob, predictable):
    """log10 back-off weights per order (float64) for a Structure and its log10
    probabilities; rescales, in place, any context whose listed continuations take
    more than 1 - 1e-7 of the mass (so unlisted words keep some)."""
    p = {n: np.power(10.0, logprob[n].astype(np.float64)) for n in logprob}
    # Unigrams over the predictable vocabulary sum to one.
    total = p[1][predictable].sum()
    p[1][predictable] /= total
    logprob[1][predictable] = np.log10(p[1][predictable])
    n_pred = int(predictable.sum())
    for n in range(2, s.order + 1):
        ctx = s.prefix[n]
        mass = np.bincount(ctx, weights=p[n], minlength=s.count(n - 1))
        width = np.bincount(ctx, minlength=s.count(n - 1))
        full = width >= n_pred          # lists every predictable word: normalise exactly
        over = (mass > 1 - EPS) & ~full
        scale = np.ones_like(mass)
        scale[full] = 1.0 / np.maximum(mass[full], 1e-300)
        scale[over] = (1 - EPS) / mass[over]
        fix = scale[ctx] != 1.0
        if fix.any():
            p[n][fix] *= scale[ctx[fix]]
            logprob[n][fix] = np.log10(p[n][fix])
    bows = {}
    for n in range(1, s.order):
        ctx = s.prefix[n + 1]
        num = 1.0 - np.bincount(ctx, weights=p[n + 1], minlength=s.count(n))
        den = 1.0 - np.bincount(ctx, weights=p[n][s.suffix[n + 1]], minlength=s.count(n))
        num = np.maximum(num, 0.0)
        den = np.maximum(den, MIN_DEN)
        with np.errstate(divide="ignore"):
            b = np.log10(num) - np.log10(den)
        width = np.bincount(ctx, minlength=s.count(n))
        b[width >= n_pred] = 0.0            # never backs off
        b[~np.isfinite(b)] = -99.0
        bows[n] = b
    bows[s.order] = np.zeros(s.count(s.order))
    return bows, p


def prune_scores(s, logprob, p, bos, eos):
    """Stolcke's D for every n-gram of order >= 2 (natural-log units)."""
    ln10 = math.log(10.0)
    logP = chain_log10P(s, logprob, bos, eos, s.order - 1)
    D = {}
    for n in range(2, s.order + 1):
        ctx = s.prefix[n]
        num = np.maximum(1.0 - np.bincount(ctx, weights=p[n], minlength=s.count(n - 1)), 0.0)
        den = np.maximum(1.0 - np.bincount(ctx, weights=p[n - 1][s.suffix[n]], minlength=s.count(n - 1)),
                         MIN_DEN)
        pw, q = p[n], p[n - 1][s.suffix[n]]
        num_c, den_c = num[ctx], den[ctx]
        bow_new = (num_c + pw) / (den_c + q)
        with np.errstate(divide="ignore", invalid="ignore"):
            # the pruned word now gets bow' q instead of p; every unlisted word
            # (mass num) bow'/bow times its old probability
            term = pw * (np.log(pw) - np.log(bow_new * q))
            term += np.where(num_c > 0, num_c * (np.log(np.maximum(num_c / den_c, 1e-300)) - np.log(bow_new)),
                             0.0)
        d = np.exp(logP[n - 1][ctx] * ln10) * term
        D[n] = np.where(np.isnan(d), np.inf, d)     # (no n-gram is pruned on a NaN)
    return D


def keep_masks(s, D, theta):
    """Which n-grams survive threshold ``theta``: top-down, an n-gram with D below
    it goes unless a kept longer n-gram has it as context or as lower-order n-gram."""
    keep = {}
    needed = None
    for n in range(s.order, 1, -1):
        k = D[n] >= theta
        if needed is not None:
            k |= needed
        keep[n] = k
        needed = np.zeros(s.count(n - 1), dtype=bool)
        needed[s.prefix[n][k]] = True
        needed[s.suffix[n][k]] = True
    return keep


def threshold_for_size(s, D, target):
    """The smallest criterion value among the n-grams' (and +inf) whose threshold keeps
    at most ``target`` n-grams of orders >= 2: the most a threshold can keep within
    it, since the count kept only falls as the threshold rises."""
    cands = unique_sorted(np.concatenate([D[n] for n in range(2, s.order + 1)]))
    cands = np.append(cands[np.isfinite(cands)], np.inf)
    lo, hi = 0, len(cands) - 1          # kept(cands[hi]) <= target always (inf prunes all it may)
    while lo < hi:
        mid = (lo + hi) // 2
        kept = sum(int(k.sum()) for k in keep_masks(s, D, cands[mid]).values())
        if kept <= target:
            hi = mid
        else:
            lo = mid + 1
    return float(cands[hi])


def apply_keep(s, logprob, keep):
    """(Structure, logprob) of the n-grams ``keep`` (keep_masks) marks; unigrams all."""
    rows = {n: s.rows(n)[keep[n]] for n in range(2, s.order + 1)}
    new = build_structure(s.V, rows)
    new_lp = {1: logprob[1]}
    for n in range(2, new.order + 1):
        # build_structure sorts by the same keys, so the kept rows keep their order
        new_lp[n] = logprob[n][keep[n]]
    return new, new_lp


def prune_structure(s, logprob, p, target, bos, eos, threshold=None):
    """(Structure, logprob, theta) after pruning to at most ``target`` n-grams of
    orders >= 2, or (``threshold`` given instead) of every n-gram whose criterion D
    (nats) is below it; unigrams are never pruned.  theta: the threshold applied."""
    total = sum(s.count(n) for n in range(2, s.order + 1))
    if threshold is None and target >= total:
        return s, logprob, 0.0
    D = prune_scores(s, logprob, p, bos, eos)
    theta = threshold_for_size(s, D, target) if threshold is None else threshold
    return (*apply_keep(s, logprob, keep_masks(s, D, theta)), theta)
