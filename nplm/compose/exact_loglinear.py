"""A log-linear mixture of back-off models written as one exact back-off table, with
the arithmetic of KenLM's ``interpolate`` (Heafield, Geigle, Massung and Schwartz,
"Efficient and exact log-linear interpolation", 2016), so that its ARPA file is
KenLM's byte for byte.

The mixture is p_I(x | h) = prod_i p_i(x | h)^l_i / Z(h), Z(h) summing the numerator
over the union vocabulary without <s>.  Its n-grams are the union of the components'
(``Union``: flat sorted arrays as nplm/compose/ngram_structure.py's ``Structure``, but
keyed by suffix, which is KenLM's output order and the order of lmplz's files, so that
every search runs on sorted queries); a word a component does not know gets that
component's <unk> probability (KenLM's rule).  Because every
component backs off, Z needs no sum over the vocabulary beyond the unigrams:

    Z(h) = B(h) (Z(h') - sum_{x: hx listed} u(h'x)) + sum_{x: hx listed} u(hx)

with u the numerator, h' the context h without its first word and
B(h) = prod_i b_i(h)^l_i; then log10 p_I(x | h) = log10 u(hx) - log10 Z(h) for a listed
hx and the back-off weight is b_I(h) = B(h) Z(h') / Z(h).  The computation is done per
order on flat arrays, in KenLM's precisions step by step (float32 weighted log10
probabilities, long double sums, double 10^x and log10 as KenLM's C calls take them,
the same order of additions), and the
n-grams are written in KenLM's order: the vocabulary by MurmurHash64A of each word
(as ``lmplz --intermediate`` numbers it), each higher order in suffix order.

Components are KenLM's intermediate files (``lmplz --intermediate BASE``: BASE.vocab,
BASE.1 .. BASE.N and BASE.kenlm_intermediate) or ARPA files.

The weights are tuned as KenLM's ``interpolate -t`` tunes them by
nplm/compose/exact_loglinear_tune.py.
"""
import functools
import math
import os
import threading

import numpy as np

from nplm.backoff.arpa import read_arpa, write_sections
from nplm.backoff.kenlm import intermediate
from nplm.backoff.kenlm._klm import hash_word
from nplm.errors import FormatError
from nplm.io.resources import ThreadPool, start_thread
from nplm.io.text import word_bytes, word_str

LD = np.longdouble
LN10 = math.log(10.0)
# KenLM gives a model without <unk> this log10 probability for it
MISSING_UNK = -100.0


class Component:
    """One model as arrays: ``words`` (bytes, id order, <unk> at 0), per order n the
    (count, n) uint32 word ids, float32 log10 probabilities and back-offs."""

    def __init__(self, name, words, ids, prob, backoff):
        self.name, self.words, self.ids, self.prob, self.backoff = name, words, ids, prob, backoff

    @property
    def order(self):
        return len(self.ids)


def intermediate_exists(base):
    return intermediate.exists(base)


def read_intermediate(base):
    """A Component from KenLM's intermediate files of ``base``."""
    words, ids, prob, backoff, payload = intermediate.read(base)
    if payload != b"pb":
        # q (lmplz --collapse_values) has no back-offs to interpolate with
        raise FormatError(f"{base}{intermediate.META}: payload q (lmplz --collapse_values) is not "
                          "supported: write the model without --collapse_values")
    # (lmplz writes each order in suffix order, which the union's searches are
    # fastest on; any order gives the same result)
    return Component(base, words, ids, prob, backoff)


def read_arpa_component(path):
    """A Component from an ARPA file (its vocabulary reordered by hash, <unk> first;
    one without <unk> gets KenLM's log10 p(<unk>) = -100)."""
    t = read_arpa(path)
    words = [word_bytes(w) for w in t.vocab]
    unk = next((i for i, w in enumerate(words) if w in (b"<unk>", b"<UNK>")), None)
    others = [i for i in range(len(words)) if i != unk]
    hashes = np.array([hash_word(words[i]) for i in others], dtype=np.uint64)
    perm = np.array(others, dtype=np.int64)[np.argsort(hashes, kind="stable")]
    new = np.empty(len(words), dtype=np.uint32)
    new[perm] = np.arange(1, len(perm) + 1, dtype=np.uint32)
    if unk is not None:
        new[unk] = 0
    uni_p = np.full(len(perm) + 1, MISSING_UNK, np.float32)
    uni_b = np.zeros(len(perm) + 1, np.float32)
    uni_p[new] = t.logprob[0]
    uni_b[new] = t.backoff[0]
    ids = [np.arange(len(perm) + 1, dtype=np.uint32)[:, None]]
    prob, backoff = [uni_p], [uni_b]
    for k in range(1, t.order):
        rows, p, b = _suffix_sorted(new[t.ids[k]], t.logprob[k],
                                    t.backoff[k] if k + 1 < t.order else np.zeros(len(t.logprob[k]), np.float32))
        ids.append(rows)
        prob.append(p)
        backoff.append(b)
    return Component(os.fspath(path), [b"<unk>"] + [words[i] for i in perm], ids, prob, backoff)


def universal_vocab(components):
    """(words, maps): <unk>, then every word of any component in hash order (KenLM's
    MergeVocab), and per component the universal id of each of its ids."""
    hashes = []
    for c in components:
        h = np.array([hash_word(w) for w in c.words[1:]], dtype=np.uint64)
        if np.any(h[1:] < h[:-1]):
            raise FormatError(f"{c.name}: word index not monotonically increasing (the vocabulary is "
                              "not in hash order: not written by lmplz --intermediate?)")
        hashes.append(h)
    every = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
    uniq, first = np.unique(every, return_index=True)
    owner = np.concatenate([[(i, j + 1) for j in range(len(h))] for i, h in enumerate(hashes) if len(h)]) \
        if len(every) else np.zeros((0, 2), np.int64)
    words = [b"<unk>"] + [components[owner[f][0]].words[owner[f][1]] for f in first]
    maps = []
    for h in hashes:
        m = np.zeros(len(h) + 1, dtype=np.int64)
        m[1:] = np.searchsorted(uniq, h) + 1
        maps.append(m)
    return words, maps


def _lookup(keys, queries, what, order=None, pool=None):
    """Index of each query in the sorted unique ``keys``; FormatError when one is
    missing.  The queries are searched in the order ``order`` (their stable argsort)
    where given: sorted queries search several times faster."""
    # (the queries are sorted where the components' n-grams come in suffix order)
    if order is not None:
        found = np.empty(len(queries), dtype=np.int64)
        found[order] = _lookup(keys, queries[order], what, pool=pool)
        return found
    if pool is not None and len(queries) >= 1 << 18:    # halves in two threads (numpy lets go of the GIL)
        half = len(queries) // 2
        first = pool.submit(_search, keys, queries[:half])
        second = _search(keys, queries[half:])
        pos, ok = first.result()
        pos, ok = np.concatenate([pos, second[0]]), ok and second[1]
    else:
        pos, ok = _search(keys, queries)
    if not ok:
        raise FormatError(what)
    return pos


def _search(keys, queries):
    pos = np.searchsorted(keys, queries)
    return pos, not len(pos) or np.array_equal(np.take(keys, pos, mode="clip"), queries)


def _suffix_sorted(ids, *columns):
    """``ids`` rows and the ``columns`` arrays permuted into suffix order (last word
    first), as lmplz writes them already."""
    w = ids.astype(np.int64)
    n = w.shape[1]
    if len(w) < 2:
        return (ids,) + columns
    ahead = np.zeros(len(w) - 1, dtype=bool)        # row i+1 before row i?
    decided = np.zeros(len(w) - 1, dtype=bool)
    for k in range(n - 1, -1, -1):
        lt, gt = w[1:, k] < w[:-1, k], w[1:, k] > w[:-1, k]
        ahead |= lt & ~decided
        decided |= lt | gt
    if not ahead.any():
        return (ids,) + columns
    perm = np.lexsort([w[:, k] for k in range(n)])
    return (ids[perm],) + tuple(c[perm] for c in columns)


class Union:
    """The components on one vocabulary and one n-gram structure (the union of their
    n-grams), each component's values aligned to the union's n-grams.

    Order n's n-grams are in KenLM's suffix order, sorted by
    ``keys[n] = suffix[n] * V + first[n]``: ``suffix[n]`` the index of the n-gram's
    last n-1 words in order n-1, ``first[n]`` its first word; ``prefix[n]`` is the
    index of its first n-1 words (its context) in order n-1.  Order 1 is the whole
    vocabulary (index = word id)."""

    def __init__(self, components):  # noqa: C901 - one pass per order: union keys, each component's place in them
        self.components = components
        self.words, maps = universal_vocab(components)
        self.V = V = len(self.words)
        self.order = N = max(c.order for c in components)
        # a component whose vocabulary is the union's keeps its ids
        maps = [None if len(m) == V else m for m in maps]
        self.keys, self.suffix, self.first, self.prefix = {}, {}, {}, {}
        # stable argsort of each order's n-grams by context: the contexts in index
        # order, each one's n-grams in suffix order (by last word)
        self.by_context = {}
        at = [[None] * c.order for c in components]      # union index of each listed n-gram
        for i, c in enumerate(components):
            at[i][0] = c.ids[0][:, 0] if maps[i] is None else maps[i][c.ids[0][:, 0]]
        with ThreadPool(1) as pool:
            self._orders(components, maps, at, pool)
        self.first[1] = np.arange(V, dtype=np.int64)
        # per component, per order: listed mask, log10 prob and back-off on union indices
        self.listed, self.prob, self.backoff = [], [], []
        for c, idxs in zip(components, at):
            L, P, B = [], [], []
            for n in range(1, N + 1):
                count = self.count(n)
                listed = np.zeros(count, dtype=bool)
                p = np.zeros(count, np.float32)
                b = np.zeros(count, np.float32)
                if n <= c.order:
                    idx = idxs[n - 1]
                    if idx is None:             # every n-gram, in the union's order
                        listed[:] = True
                        p[:] = c.prob[n - 1]
                        b[:] = c.backoff[n - 1]
                    else:
                        listed[idx] = True
                        p[idx] = c.prob[n - 1]
                        b[idx] = c.backoff[n - 1]
                L.append(listed)
                P.append(p)
                B.append(b)
            self.listed.append(L)
            self.prob.append(P)
            self.backoff.append(B)

    def _orders(self, components, maps, at, pool):  # noqa: C901 - one pass per order: keys, places, contexts
        """The union's orders 2..N, and each component's place in them (``at``)."""
        V, N = self.V, self.order
        for n in range(2, N + 1):
            mkeys = {}
            for i, c in enumerate(components):
                if n > c.order:
                    continue
                w = c.ids[n - 1]
                m = maps[i]

                def col(d, w=w, m=m):
                    return w[:, d].astype(np.int64) if m is None else m[w[:, d]]

                u = col(n - 1)
                for d in range(n - 2, 0, -1):
                    u = _lookup(self.keys[n - d], u * V + col(d),
                                f"{c.name}: a {n}-gram whose suffix is not listed", pool=pool)
                mkeys[i] = u * V + col(0)
            keys = np.sort(np.concatenate(list(mkeys.values())), kind="stable")
            if len(keys):
                keep = np.empty(len(keys), dtype=bool)
                keep[0] = True
                np.not_equal(keys[1:], keys[:-1], out=keep[1:])
                keys = keys[keep]
            self.keys[n] = keys
            self.suffix[n] = keys // V
            self.first[n] = keys % V
            for i, k in mkeys.items():
                # (a component listing every n-gram of the order, as a lower-order
                # model of the same text does, needs no search)
                at[i][n - 1] = None if len(k) == len(keys) and np.array_equal(k, keys) else _lookup(keys, k, "", pool=pool)
            if n == 2:
                self.prefix[n] = self.first[n]
                self.by_context[n] = np.argsort(self.first[n], kind="stable")
            else:
                q = self.prefix[n - 1][self.suffix[n]] * V + self.first[n]
                self.by_context[n] = np.argsort(q, kind="stable")
                self.prefix[n] = _lookup(self.keys[n - 1], q, f"a {n}-gram whose context is not listed",
                                         self.by_context[n], pool)

    def count(self, n):
        return self.V if n == 1 else len(self.keys[n])

    def context_chain(self, n):
        """For the contexts of order n (the (n-1)-grams, union indices 0..count-1), the
        index of each suffix of length k (k = 1..n-1) as a list indexed k-1."""
        idx = np.arange(self.count(n - 1), dtype=np.int64)
        out = [None] * (n - 1)
        out[n - 2] = idx
        for k in range(n - 1, 1, -1):
            idx = self.suffix[k][idx]
            out[k - 2] = idx
        return out

    def rows(self, n, idx):
        """(len(idx), n) int32 word ids of order-n n-grams ``idx``."""
        out = np.empty((len(idx), n), dtype=np.int32)
        cur = np.asarray(idx, dtype=np.int64)
        for k in range(n, 1, -1):
            out[:, n - k] = self.first[k][cur]
            cur = self.suffix[k][cur]
        out[:, n - 1] = cur
        return out


def _halves(pool, fn, count):
    """fn(0, h) and fn(h, count) joined along their last axis, the first in
    ``pool``'s thread where the work is large enough to share (numpy lets go of the
    GIL)."""
    if pool is None or count < 1 << 17:
        return fn(0, count)
    h = count // 2
    first = pool.submit(fn, 0, h)
    second = fn(h, count)
    return np.concatenate([first.result(), second], axis=-1)


def _terms(prob, lower, backoff_once, g, cs, a, b):
    """KenLM's terms 10^prob - 10^(lower + B(context)) of the n-grams g[a:b] (in
    context order; cs their contexts), as KenLM's in double, beside the sum of the two
    powers (what the terms' rounding scales with): a (2, b - a) array."""
    g, cs = g[a:b], cs[a:b]
    high = np.power(10.0, prob[g].astype(np.float64))
    low = np.power(10.0, (lower[g].astype(LD) + backoff_once[cs]).astype(np.float64))
    out = np.empty((2, len(g)))
    np.subtract(high, low, out=out[0])      # (a double difference, as KenLM's)
    np.add(high, low, out=out[1])
    return out


def _undecided(x, err):
    """Where float32 of a value x computed with error at most ``err`` is not settled."""
    return np.float32(x - err) != np.float32(x + err)


class _Exact:
    """log10 Z of chosen contexts computed as KenLM computes it, with libm's pow and
    log10 (Python's math module: glibc's, as KenLM's) one value at a time, and the Zs
    of their suffixes beneath them: for the few written values whose float32 the
    vectorised computation leaves open (a few dozen contexts on PTB's KN3 + KN5),
    those within about 1e-6 of 0 mostly."""

    def __init__(self, u, log_z):
        self.u, self.log_z = u, log_z
        self.steps = {}     # per order n: the n-grams' prob, lower, B(context), grouping
        self.cache = {}     # per order n: {context: long double log10 Z}

    def keep(self, n, prob, lower, backoff_once, g, cs):
        self.steps[n] = (prob, lower, backoff_once, g, cs)
        self.cache.setdefault(n, {})

    def z(self, n, contexts):
        """(log10 Z(h), log10 Z(h')) in long double of the order-n contexts
        ``contexts`` (sorted, unique)."""
        if n == 2:
            zl = np.full(len(contexts), self.log_z, dtype=LD)
        else:
            uniq, inv = np.unique(self.u.suffix[n - 1][contexts], return_inverse=True)
            zl = self.z(n - 1, uniq)[0][inv.ravel()]
        cache = self.cache[n]
        todo = [i for i, c in enumerate(contexts.tolist()) if c not in cache]
        if todo:
            prob, lower, backoff_once, g, cs = self.steps[n]
            want = contexts[todo]
            lo, hi = np.searchsorted(cs, want, "left"), np.searchsorted(cs, want, "right")
            for c, a, b, zlow in zip(want.tolist(), lo.tolist(), hi.tolist(), zl[todo]):
                rows = g[a:b]
                bo = backoff_once[c]
                z_delta = LD(0)
                # (long double scalars: tolist() would make them doubles)
                for p, q in zip(prob[rows].astype(np.float64).tolist(), lower[rows].astype(LD) + bo):
                    z_delta += LD(math.pow(10.0, p) - math.pow(10.0, float(q)))
                cache[c] = LD(math.log10(float(LD(math.pow(10.0, float(zlow + bo))) + z_delta)))
        return np.array([cache[c] for c in contexts.tolist()], dtype=LD), zl


def _normalised(prob, z, ctx, a, b):
    """float32 of log10 u - log10 Z(context) of n-grams a..b-1, in long double."""
    return (prob[a:b].astype(LD) - z[ctx[a:b]]).astype(np.float32)


def _float_sum(terms):
    """float32 sum of float32 terms added in order from 0 (KenLM's float accumulation)."""
    acc = np.zeros_like(terms[0])
    for t in terms:
        acc = (acc + t).astype(np.float32)
    return acc


def _double_sum(terms):
    """float32 of the double sum of the terms in order from 0.0 (std::accumulate)."""
    acc = np.zeros(len(terms[0]), np.float64)
    for t in terms:
        acc += t
    return acc.astype(np.float32)


def interpolate_tables(u, weights, progress=None):
    """(counts, blocks) of the mixture with ``weights`` (float32 as KenLM parses them):
    per order n, the n-grams' word ids in KenLM's output order, log10 probabilities
    and back-offs, as ``write_sections`` takes them.  The tables are computed in a
    thread, order by order: ``blocks(k)`` waits for order k+1 only, so writing the
    lower orders overlaps computing the higher ones."""
    N = u.order
    out_prob, out_backoff = [None] * N, [None] * N
    ready = [threading.Event() for _ in range(N)]
    failed = []

    def work():
        try:
            with ThreadPool(1) as pool:
                _compute(u, weights, progress, out_prob, out_backoff, ready, pool)
        except BaseException as e:          # handed to the writer, which raises it
            failed.append(e)
            for r in ready:
                r.set()

    worker = threading.Thread(target=work, daemon=True)
    start_thread(worker)
    counts = [u.count(n) for n in range(1, N + 1)]

    def blocks(k):
        ready[k].wait()
        if failed:
            raise failed[0]
        n = k + 1
        step = 1 << 20
        for a in range(0, counts[k], step):
            b = min(a + step, counts[k])
            yield u.rows(n, np.arange(a, b)), out_prob[k][a:b], out_backoff[k][a:b]
        if k == N - 1:
            worker.join()

    return counts, blocks


def _compute(u, weights, progress, out_prob, out_backoff, ready, pool=None):  # long: KenLM's merge and normalise steps in order
    """The mixture's log10 probabilities and back-offs into ``out_prob`` and
    ``out_backoff`` (per order), setting ``ready[k]`` as order k+1 is final."""
    M = len(u.components)
    lam = np.asarray(weights, dtype=np.float32)
    N = u.order
    say = progress or (lambda line: None)
    say("Merging probabilities.")
    # Each component's weighted log10 probability at its longest listed suffix, and
    # the order (0-based) that suffix has; their sum (in double, stored as float).
    probs = [None] * M
    froms = [None] * M
    for m in range(M):
        p = (lam[m] * u.prob[m][0]).astype(np.float32)
        probs[m] = [np.where(u.listed[m][0], p, p[0]).astype(np.float32)]
        froms[m] = [np.zeros(u.V, np.uint8)]
    merged = [_double_sum([probs[m][0] for m in range(M)])]
    merged[0][0] = _float_sum([probs[m][0][:1] for m in range(M)])[0]     # <unk>: a float sum
    for n in range(2, N + 1):
        suf = u.suffix[n]
        for m in range(M):
            listed = u.listed[m][n - 1]
            if listed.all():            # (a component listing every n-gram of the order)
                probs[m].append(lam[m] * u.prob[m][n - 1])
                froms[m].append(np.full(len(listed), n - 1, dtype=np.uint8))
                continue
            p = np.where(listed, lam[m] * u.prob[m][n - 1], probs[m][n - 2][suf])
            probs[m].append(p.astype(np.float32))
            froms[m].append(np.where(listed, np.uint8(n - 1), froms[m][n - 2][suf]).astype(np.uint8))
        merged.append(_double_sum([probs[m][n - 1] for m in range(M)]))
    del probs

    say("Normalizing")
    # Z of the empty context: the unigrams less the 1 of <s>, whose merged log10
    # probability lmplz's 0 makes 0 (KenLM takes 1 off whatever it is).
    # (libm's pow, as KenLM's: numpy's vectorised one may differ in the last bit)
    z1 = np.array([math.pow(10.0, p) for p in merged[0].astype(np.float64).tolist()]).astype(LD).sum() - LD(1.0)
    log_z = np.float32(np.log10(z1))
    out_prob[0] = (merged[0] - log_z).astype(np.float32)
    for n in range(1, N + 1):
        out_backoff[n - 1] = np.zeros(u.count(n), np.float32)
    z_ctx = {}      # per order n-1, Z of each (n-1)-gram as a context (long double)
    err_ctx = {}    # and a bound on its error (10^x and log10 being double's)
    exact = _Exact(u, LD(log_z))
    for n in range(2, N + 1):
        ctx = u.prefix[n]
        C = u.count(n - 1)
        chain = u.context_chain(n)
        prob = merged[n - 1].copy()
        lower = merged[n - 2][u.suffix[n]]
        backoff_once = np.zeros(C, dtype=LD)
        for m in range(M):
            # (float32 throughout, as KenLM: float32 arrays and scalars stay float32)
            f = froms[m][n - 1]
            # b_m of the context's suffix of length k + 1, k = 0 .. n-2 (0 where unlisted)
            B = [u.backoff[m][k][chain[k]] for k in range(n - 1)]
            acc = np.zeros(len(prob), np.float32)
            for k in range(n - 2):
                take = f <= k
                if take.any():
                    acc = np.where(take, acc + B[k][ctx], acc)
            lower = lower + acc * lam[m]
            acc = np.where(f < n - 1, acc + B[n - 2][ctx], acc)
            prob = prob + acc * lam[m]
            backoff_once += (lam[m] * B[n - 2]).astype(LD)
        z_lower = np.full(C, LD(log_z), dtype=LD) if n == 2 else z_ctx[n - 2][u.suffix[n - 1]]
        # Z(h) = B(h) (Z(h') - sum u(h'x)) + sum u(hx), the sums in KenLM's order
        # (context by context, words ascending)
        g = u.by_context[n]
        cs = ctx[g]
        both = _halves(pool, functools.partial(_terms, prob, lower, backoff_once, g, cs), len(g))
        has = np.zeros(C, dtype=bool)
        has[cs] = True
        z_delta = np.zeros(C, dtype=LD)
        size = np.zeros(C)
        if len(cs):
            starts = np.flatnonzero(np.concatenate([[True], cs[1:] != cs[:-1]]))
            z_delta[cs[starts]] = np.add.reduceat(both[0].astype(LD), starts)
            size[cs[starts]] = np.add.reduceat(both[1], starts)
        del both
        base = z_lower + backoff_once
        # KenLM's pow(10.0, x) and log10 are C's double functions, their long double
        # arguments rounded to double; so are these (numpy's, which may differ from
        # glibc's in the last bit: see _Exact below)
        z = np.full(C, np.nan, dtype=LD)
        top = np.power(10.0, base[has].astype(np.float64))
        total = (top.astype(LD) + z_delta[has]).astype(np.float64)
        z64 = np.zeros(C)
        z64[has] = np.log10(total)
        z[has] = z64[has]
        z_ctx[n - 1] = z
        out_prob[n - 1] = _halves(pool, functools.partial(_normalised, prob, z, ctx), len(prob))
        bo = np.where(has, (base - z).astype(np.float64), 0.0)
        out_backoff[n - 2] = bo.astype(np.float32)
        # Where numpy's pow and log10 (which may differ from libm's in the last bit)
        # leave a written value's float32 open, the value again with libm's (_Exact):
        # a bound on each Z's error, from its terms' and its suffix's
        err_lower = np.zeros(C) if n == 2 else err_ctx[n - 2][u.suffix[n - 1]]
        err = np.zeros(C)
        err[has] = ((err_lower[has] * top + 1e-15 * (top + size[has]) / LN10) / np.abs(total)
                    + 1e-15 * (1.0 + np.abs(z64[has])))
        err_ctx[n - 1] = err
        exact.keep(n, prob, lower, backoff_once, g, cs)
        open_bo = has & _undecided(bo, err + err_lower)
        open_p = _undecided(prob.astype(np.float64) - z64[ctx], err[ctx])
        redo = np.union1d(np.flatnonzero(open_bo), ctx[open_p])
        if len(redo):
            zr, zl = exact.z(n, redo)
            out_backoff[n - 2][redo] = ((zl + backoff_once[redo]) - zr).astype(np.float32)
            mark = np.zeros(C, dtype=bool)
            mark[redo] = True
            sel = np.flatnonzero(mark[ctx])
            out_prob[n - 1][sel] = (prob[sel].astype(LD) - zr[np.searchsorted(redo, ctx[sel])]).astype(np.float32)
        # (orders below the highest: probabilities above 1 written as 1, as KenLM)
        np.minimum(out_prob[n - 2], np.float32(0), out=out_prob[n - 2])
        ready[n - 2].set()
        merged[n - 2] = None
    say("Reunifying backoffs")
    ready[N - 1].set()


def write_interpolated(u, weights, out, progress=None):
    """Write the mixture's ARPA file to the binary stream ``out``."""
    counts, blocks = interpolate_tables(u, weights, progress)
    write_sections(out, [word_str(w) for w in u.words], counts, None, blocks)
