"""Lower orders shaped for backing off, estimated from the teacher (for distillation).

A back-off table gives a word w that context h does not list the probability
bow(h) p(w | h'), so p(. | h') has two jobs: it is the distribution after the short
context h' when nothing longer is listed, and the shape of the mass that longer
contexts leave to unlisted words.  A teacher's own short-context distribution does
the first job and fails the second: the words it favours are the ones most longer
contexts already list, so the leftover mass lands on them instead of on the words
that really follow unlisted.  Kneser-Ney's continuation counts correct this for an
n-gram model; here the same idea is computed from the teacher.  The order-n entry
(g, w) becomes the expected leftover mass of its one-word-longer contexts e = (x, g):

    p(w | g) = sum_e P(e) p_T(w | e) [(e, w) not listed] / sum_e P(e) M(e)

with M(e) = 1 - sum_{w listed after e} p_T(w | e) the mass e leaves, and P(e) the
teacher's chain probability of e.  The first job enters the same sum: histories
ending in g whose longer context is not listed at all (probability P(g) - sum_e P(e))
use p(w | g) directly, so they add that share of the teacher's own p_T(w | g) to the
numerator and to the denominator; so do contexts e that list nothing.  For the
unigrams g is empty and every word is a candidate (the teacher's full distribution
after each one-word context); for n >= 2 the candidates are the words listed after
g; the teacher scores p_T(w | e) for the ``max_extensions`` most probable contexts
e of each g, and the rarer ones are taken to leave p_T(w | g) on the words they do
not list (their mass M(e) exact), so the work stays linear in the listed n-grams.

For the unigrams the ratio is only a first guess.  A word w that context u does not
list gets bow(u) q(w) = L(u) q(w) / (1 - Q(u)), with L(u) the mass u leaves and
Q(u) = sum of q over the words u lists, so the teacher-expected log-likelihood of all
those events depends on q through

    F(q) = sum_w m(w) ln q(w) - sum_u M(u) ln(1 - Q(u)),

m(w) = sum_u P(u) p_T(w | u) [(u, w) not listed] and M(u) = P(u) L(u).  The ratio
q ~ m maximises the first term only; the second rewards mass on words that contexts
list, since there it is renormalised away and every unlisted word's share grows.
``fit_unigrams`` finds the stationary point, m(w)/q(w) + g(w) = lambda with
g(w) = sum over the contexts u listing w of M(u) / (1 - Q(u)), by iterating
q = m / (lambda - g).  On PTB it took the distilled table from 133.82 to 132.48 (test)
and 141.94 to 140.25 (valid).
"""
import numpy as np

from nplm.backoff.tables import chain_log10P, expand_ranges
from nplm.io.progress import tqdm


def fit_unigrams(m, M, ctx, words, max_iter=200, tol=1e-12):
    """The q on the simplex where F(q) = sum_w m(w) ln q(w) - sum_u M(u) ln(1 - Q(u))
    is stationary (module docstring); Q(u) sums q over ``words[ctx == u]``, the words
    context u lists.  m, M: float64 (V,); ctx, words: the listed (u, w) pairs.
    Words with m(w) = 0 get q(w) = 0.  Returns q (float64, sums to 1)."""
    m = np.asarray(m, np.float64)
    M = np.asarray(M, np.float64)
    V = len(m)
    total = m.sum()
    if total <= 0:
        raise ValueError("no leftover mass to fit the back-off unigrams to")
    live = m > 0
    mm, MM = m[live] / total, M / total
    q = np.zeros(V)
    q[live] = mm
    for _ in range(max_iter):
        Q = np.bincount(ctx, weights=q[words], minlength=V)
        c = MM / np.maximum(1.0 - Q, 1e-12)
        g = np.bincount(words, weights=c[ctx], minlength=V)[live]
        # lambda > max g solves sum m / (lambda - g) = 1 (decreasing in lambda);
        # at lo + sum(mm) = lo + 1 the sum is <= 1
        lo = g.max()
        hi = lo + 1.0
        for _ in range(100):
            mid = 0.5 * (lo + hi)
            if mid == lo or mid == hi:
                break
            if (mm / (mid - g)).sum() > 1.0:
                lo = mid
            else:
                hi = mid
        new = np.zeros(V)
        new[live] = mm / (hi - g)
        new /= new.sum()
        change = np.abs(new - q).max()
        q = new
        if change < tol:
            break
    return q


def unigrams(score, s, lp, bos, eos, predictable, progress=False, chunk=64, fit=True, max_contexts=None):
    """log10 unigram probabilities for backing off (float64, V): the continuation
    ratio q(w) ~ m(w) = sum_u P(u) p_T(w | u) [(u, w) not listed], then (``fit``)
    fitted to the bows' renormalisation by ``fit_unigrams``.  The teacher's whole
    distribution is scored after the ``max_contexts`` most probable contexts u (all
    by default); the rarer ones are taken to leave the teacher's unigram shape on the
    words they do not list, with their exact mass (``rare_contexts``)."""
    V = s.V
    P = np.power(10.0, chain_log10P(s, lp, bos, eos, 1)[1])
    P[eos] = 0.0                            # never a context
    P[~predictable & (np.arange(V) != bos)] = 0.0
    ctx, words = s.prefix[2], s.word[2]     # sorted by context
    bounds = np.searchsorted(ctx, np.arange(V + 1))
    q = np.zeros(V)
    M = np.zeros(V)
    us = np.flatnonzero(P > 0).astype(np.int32)
    if max_contexts is not None and len(us) > max_contexts:
        us = us[np.argsort(-P[us], kind="stable")]
        q, M = rare_contexts(us[max_contexts:], P, s, lp, predictable)
        us = np.sort(us[:max_contexts])
    allw = np.arange(V, dtype=np.int32)
    it = range(0, len(us), chunk)
    if progress:
        it = tqdm(it, desc="continuation 1-grams", unit="chunk")
    for lo in it:
        u = us[lo:lo + chunk]
        rows = np.column_stack([np.repeat(u, V), np.tile(allw, len(u))]).astype(np.int32)
        d = np.power(10.0, score(rows).astype(np.float64)).reshape(len(u), V)
        d[:, ~predictable] = 0.0
        for k, uk in enumerate(u):
            d[k, words[bounds[uk]:bounds[uk + 1]]] = 0.0
        q += P[u] @ d
        M[u] = P[u] * d.sum(axis=1)
    out = lp[1].astype(np.float64).copy()
    total = q.sum()
    if total > 0:
        if fit:
            q = fit_unigrams(q, M, ctx, words)
        out[predictable] = np.log10(np.maximum(q[predictable] / q.sum(), 1e-99))
    return out


def rare_contexts(rare, P, s, lp, predictable):
    """(m, M) of the one-word contexts ``rare`` without scoring their distributions:
    each leaves its exact mass L(u) = 1 - sum of the teacher's listed p(w | u) (the
    table's bigram scores), spread over the words it does not list in the shape of
    the teacher's unigrams r: m(w) = sum_u P(u) L(u) r(w) [(u, w) unlisted] / (1 - sum
    of r over the words u lists)."""
    V = s.V
    ctx, words = s.prefix[2], s.word[2]
    r = np.where(predictable, np.power(10.0, lp[1].astype(np.float64)), 0.0)
    r /= r.sum()
    is_rare = np.zeros(V, dtype=bool)
    is_rare[rare] = True
    sel = is_rare[ctx]
    c, w = ctx[sel], words[sel]
    listed_p = np.bincount(c, weights=np.power(10.0, lp[2][sel].astype(np.float64)), minlength=V)
    listed_r = np.bincount(c, weights=r[w], minlength=V)
    M = np.where(is_rare, P * np.maximum(1.0 - listed_p, 0.0), 0.0)
    A = np.where(is_rare, M / np.maximum(1.0 - listed_r, 1e-12), 0.0)
    m = r * (A.sum() - np.bincount(w, weights=A[c], minlength=V))
    return np.maximum(m, 0.0), M


def level(score, s, lp, n, bos, eos, max_extensions=64, progress=False, chunk=1 << 21):  # long: one greedy pass
    """log10 probabilities of the order-n entries (2 <= n < order) for backing off
    (float64); entries whose context has no longer context listed keep lp[n]."""
    logP = chain_log10P(s, lp, bos, eos, n)
    count_n = s.count(n)
    # M(e): mass each order-n n-gram e leaves as a context of order n+1
    p_up = np.power(10.0, lp[n + 1].astype(np.float64))
    M = np.maximum(1.0 - np.bincount(s.prefix[n + 1], weights=p_up, minlength=count_n), 0.0)
    # extensions e of each context g (an order n-1 index): e's suffix is g
    g_of_e = s.suffix[n]
    P = np.power(10.0, logP[n])
    P[s.word[n] == eos] = 0.0               # </s> ends the sentence: never a context
    order = np.lexsort((-P, g_of_e))        # by g, most probable first
    ge = g_of_e[order]
    first = np.searchsorted(ge, ge, "left")
    rank = np.arange(len(ge)) - first
    ext = order[(rank < max_extensions) & (P[order] > 0)]
    ext = ext[np.argsort(g_of_e[ext], kind="stable")]
    g_ext = g_of_e[ext]
    # candidates after e: the order-n n-grams listed after g = suffix(e)
    starts = np.searchsorted(s.prefix[n], g_ext, "left")
    per = np.searchsorted(s.prefix[n], g_ext, "right") - starts
    r = np.zeros(count_n)
    rows_n = s.rows(n)
    bar = None
    if progress:
        bar = tqdm(total=int(per.sum()), desc=f"continuation {n}-grams", unit="row", unit_scale=True)
    for k, offset in expand_ranges(per, chunk):
        j = starts[k] + offset
        rows = np.column_stack([rows_n[ext[k]], s.word[n][j]]).astype(np.int32)
        r += np.bincount(j, weights=P[ext[k]] * np.power(10.0, score(rows).astype(np.float64)),
                         minlength=count_n)
        if bar is not None:
            bar.update(len(k))
    if bar is not None:
        bar.close()
    # the listed (e, w) are not left over: take their teacher mass back out
    used = np.zeros(count_n, dtype=bool)
    used[ext] = True
    up_e = s.prefix[n + 1]
    sel = used[up_e]
    r -= np.bincount(s.suffix[n + 1][sel], weights=P[up_e[sel]] * p_up[sel], minlength=count_n)
    n_ctx = s.count(n - 1)
    # The other extensions (beyond the max_extensions most probable of each g) are
    # rarer contexts, which list fewer words: leaving them out would bias the shape
    # towards the words frequent contexts already list.  Their leftover is taken as
    # p_T(w | g) on the words each does not list, with its exact mass M(e).
    rest = ~used & (P > 0)
    S_rest = np.bincount(g_of_e[rest], weights=P[rest], minlength=n_ctx)
    sel = rest[up_e]
    listed_rest = np.bincount(s.suffix[n + 1][sel], weights=P[up_e[sel]], minlength=count_n)
    # Histories whose longer context is not listed at all use p(w | g) as it is:
    # their share P(g) - sum_e P(e) keeps the teacher's distribution.
    Pg = np.power(10.0, logP[n - 1])
    Pg[s.word[n - 1] == eos if n > 2 else np.arange(n_ctx) == eos] = 0.0
    direct = np.maximum(Pg - np.bincount(g_of_e, weights=P, minlength=n_ctx), 0.0)
    g_of_entry = s.prefix[n]
    p_n = np.power(10.0, lp[n].astype(np.float64))
    num = np.maximum(r, 0.0) + p_n * np.maximum(S_rest[g_of_entry] + direct[g_of_entry] - listed_rest, 0.0)
    total = np.bincount(g_of_e, weights=P * M, minlength=n_ctx) + direct
    out = lp[n].astype(np.float64).copy()
    ok = total[g_of_entry] > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        val = num / total[g_of_entry]
    # a listed word no context ever leaves mass to still needs a probability
    val = np.maximum(val, 1e-7 * p_n)
    out[ok] = np.log10(val[ok])
    return out
