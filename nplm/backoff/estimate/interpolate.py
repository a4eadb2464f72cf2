"""Stage 4, interpolating: probabilities and back-offs, order by order.

p(w|c) = (a(cw) - D(a(cw))) / sum_x a(cx) + gamma(c) p(w|c') where c' is c without
its first word; gamma(c), the discounted and pruned mass of c's extensions, is also
c's back-off.  The arithmetic is in ``_kn_probs`` (lmplz's, in float32).  Here the
context of each n-gram is found in the suffix trie of the in-memory n-grams
(``partitioned.py`` joins contexts across parts instead).
"""
import os

import numpy as np

from nplm.backoff import _kn, _kn_probs


def unigrams(adj1, mark1, disc, config, kept1):
    """Unigram probabilities (V,) and their min(0, log10)."""
    uniform = _kn_probs.uniform_probability(max(config.vocab_pad, kept1 - 1))
    prob = np.empty(len(adj1), dtype=np.float32)
    logprob = np.empty(len(adj1), dtype=np.float32)
    _kn_probs.unigram_probs(adj1, mark1, disc, config.interpolate_unigrams, uniform, prob, logprob)
    return prob, logprob


def contexts(adjusted, k, ctx_prev, threads):
    """The row in order k-1 of each order-k n-gram's context, by the suffix trie:
    the context of ``v x w`` is the child ``v`` of the context of ``x w``."""
    i = k - 1
    if k == 2:
        return np.ascontiguousarray(adjusted.words[1][:, 0])
    sizes = adjusted.sizes
    cb = _kn.child_begin(adjusted.parent[i - 1], sizes[i - 2])
    ctx = np.empty(sizes[i], dtype=np.int32)
    if _kn.link_contexts(adjusted.words[i], adjusted.parent[i], ctx_prev, adjusted.words[i - 1],
                         cb, ctx, threads) != 0:
        raise RuntimeError(f"internal error: a context of order {k} is missing")
    return ctx


def interpolate(adjusted, discounts, kept, config, report):
    """(logprob, backoff) lists per order from the in-memory ``Adjusted``, whose
    arrays are dropped as soon as they were last used."""
    sizes, order = adjusted.sizes, config.order
    report.start(sum(sizes))
    threads = max(1, min(2, os.cpu_count() or 1))   # the loops are memory-bound
    prob, lp1 = unigrams(adjusted.adj[0], adjusted.mark[0], discounts[0], config, kept[0])
    logprob = [lp1] + [np.empty(s, dtype=np.float32) for s in sizes[1:]]
    backoff = [np.zeros(s, dtype=np.float32) for s in sizes]
    done = sizes[0]
    report.update(done)
    ctx_prev = None
    for k in range(2, order + 1):
        i = k - 1
        adjusted.adj[i - 1] = None
        ctx = contexts(adjusted, k, ctx_prev, threads)
        adjusted.parent[i - 1] = ctx_prev = None
        _kn.release_free_memory()
        prob_k = np.empty(sizes[i], dtype=np.float32)
        _kn_probs.order_probs(adjusted.adj[i], adjusted.mark[i], ctx, adjusted.parent[i], discounts[i],
                              prob, config.pruning, threads, prob_k, logprob[i], backoff[i - 1])
        prob, ctx_prev = prob_k, ctx
        del prob_k, ctx
        done += sizes[i]
        report.update(done)
    del prob, ctx_prev
    adjusted.adj = adjusted.parent = None
    _kn.release_free_memory()
    report.finish()
    return logprob, backoff
