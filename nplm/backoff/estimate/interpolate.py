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


class Collapse:
    """lmplz's --collapse_values: each order's probabilities replaced by log10 q once
    its back-offs are known (see ``_kn_probs.collapse``), its back-offs by 0."""

    def __init__(self):
        self.delta = self.gamma = None

    def order(self, k, prob, gamma, suffix, context, logprob, backoff):
        """Order k's q into ``logprob`` from its probabilities, back-offs (None: all
        1, the highest order), suffix and context rows in order k-1."""
        gamma = np.ones(len(prob), dtype=np.float32) if gamma is None else gamma
        delta = np.empty(len(prob), dtype=np.float32)
        if k == 1:
            _kn_probs.collapse(prob, gamma, None, None, None, None, True, delta, logprob)
        else:
            _kn_probs.collapse(prob, gamma, self.delta, self.gamma, np.ascontiguousarray(suffix, dtype=np.int32),
                               np.ascontiguousarray(context, dtype=np.int32), False, delta, logprob)
        backoff[:] = 0.0
        self.delta, self.gamma = delta, gamma


def interpolate(adjusted, discounts, kept, config, report):
    """(logprob, backoff) lists per order from the in-memory ``Adjusted``, whose
    arrays are dropped as soon as they were last used; with
    ``config.collapse_values`` the log10 q of each n-gram and back-offs 0."""
    sizes, order = adjusted.sizes, config.order
    report.start(sum(sizes))
    threads = max(1, min(2, os.cpu_count() or 1))   # the loops are memory-bound
    prob, lp1 = unigrams(adjusted.adj[0], adjusted.mark[0], discounts[0], config, kept[0])
    logprob = [lp1] + [np.empty(s, dtype=np.float32) for s in sizes[1:]]
    backoff = [np.zeros(s, dtype=np.float32) for s in sizes]
    collapse = Collapse() if config.collapse_values else None
    done = sizes[0]
    report.update(done)
    ctx_prev = None
    for k in range(2, order + 1):
        i = k - 1
        adjusted.adj[i - 1] = None
        ctx = contexts(adjusted, k, ctx_prev, threads)
        # (order k-1's suffix and context rows, for its q once its back-offs are known)
        lower = (adjusted.parent[i - 1], ctx_prev) if collapse else None
        adjusted.parent[i - 1] = ctx_prev = None
        _kn.release_free_memory()
        prob_k = np.empty(sizes[i], dtype=np.float32)
        gamma = np.empty(sizes[i - 1], dtype=np.float32) if collapse else None
        _kn_probs.order_probs(adjusted.adj[i], adjusted.mark[i], ctx, adjusted.parent[i], discounts[i],
                              prob, config.pruning, threads, prob_k, logprob[i], backoff[i - 1], gamma)
        if collapse:
            collapse.order(k - 1, prob, gamma, *lower, logprob[i - 1], backoff[i - 1])
            del lower, gamma
        prob, ctx_prev = prob_k, ctx
        del prob_k, ctx
        done += sizes[i]
        report.update(done)
    if collapse:
        collapse.order(order, prob, None, adjusted.parent[order - 1], ctx_prev, logprob[-1], backoff[-1])
    del prob, ctx_prev
    adjusted.adj = adjusted.parent = None
    _kn.release_free_memory()
    report.finish()
    return logprob, backoff
