"""Tuning the weights of a log-linear mixture of back-off models (an
nplm.compose.exact_loglinear ``Union``) as KenLM's ``interpolate -t`` does: ten
Newton steps, each scaled by 0.7, from uniform weights, on the cross-entropy of a
tuning text, with the exact gradient (expected minus observed ln probabilities of each
component) and Hessian (their covariance).  The expectations over the whole vocabulary
need only the words some component lists after the context's last word (the
extensions): every other word backs off to the unigrams in every component, so its
terms are the unigram sums less the extensions' share.

A module of its own because it needs scipy.sparse, which the interpolation alone does
not load."""
import math

import numpy as np
from scipy.sparse import csr_matrix

from nplm.compose.exact_loglinear import LN10
from nplm.errors import FormatError
from nplm.io.text import word_str

TUNE_ITERATIONS = 10
TUNE_STEP = 0.7


def read_tuning(path, u):
    """The tuning text's tokens as union word ids: per line its words then </s>
    (an empty line is </s> alone); words no component knows are <unk> (0).  Returns
    (words, bounds): the word ids and each sentence's start (and the end)."""
    index = {w: i for i, w in enumerate(u.words)}
    eos = index.get(b"</s>", 0)
    words, bounds = [], [0]
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for line in lines:
        for w in line.split():
            if w in (b"<s>", b"</s>"):
                raise FormatError(f"Illegal word in tuning data: {word_str(w)}")
            words.append(index.get(w, 0))
        words.append(eos)
        bounds.append(len(words))
    if not words:
        raise FormatError("Empty tuning data")
    return np.asarray(words, dtype=np.int64), np.asarray(bounds, dtype=np.int64)


class TuningSet:
    """Everything the derivatives need, for every distinct context of the tuning
    text (its longest suffix listed in the union): the components' ln back-off to the
    unigrams, and ln p_i(x | context) of each word x some component lists after the
    context's last word (the extensions); the observed ln probabilities summed."""

    def __init__(self, u, words, bounds):  # noqa: C901 - contexts, back-offs, extensions and observations in turn
        V, N, M = u.V, u.order, len(u.components)
        bos = u.words.index(b"<s>") if b"<s>" in u.words else 0
        self.bos = bos
        # history of each token: the previous N-1 words of its sentence, <s> first
        T = len(words)
        sent = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
        pos = np.arange(T) - bounds[sent]            # position within the sentence
        def back(j):                                  # word j places back, -1 past <s>
            out = np.full(T, -1, dtype=np.int64)
            out[pos == j - 1] = bos
            ok = pos >= j
            out[ok] = words[np.flatnonzero(ok) - j]
            return out
        # longest listed suffix of each history, as (length, index) per token
        idx = back(1)
        length = np.ones(T, dtype=np.int64)
        chain_cur = idx.copy()
        for k in range(2, N):
            w = back(k)
            alive = (length == k - 1) & (w >= 0)
            if not alive.any():
                break
            q = chain_cur[alive] * V + w[alive]
            keys = u.keys[k]
            p = np.minimum(np.searchsorted(keys, q), max(len(keys) - 1, 0))
            found = keys[p] == q if len(keys) else np.zeros(len(q), bool)
            sel = np.flatnonzero(alive)[found]
            chain_cur[sel] = p[found]
            length[sel] = k
        # distinct contexts
        ctx_key = length * (1 << 40) + chain_cur
        uniq, inv = np.unique(ctx_key, return_inverse=True)
        inv = inv.ravel()
        self.count = np.bincount(inv, minlength=len(uniq)).astype(np.float64)
        C = len(uniq)
        c_len = uniq >> 40
        c_idx = uniq & ((1 << 40) - 1)
        # chain[k][c]: index in order k of the context's last k words (-1 beyond its length)
        chain = {}
        for k in range(int(c_len.max()), 0, -1):
            at = c_len >= k
            ch = np.full(C, -1, dtype=np.int64)
            ch[at] = np.where(c_len[at] == k, c_idx[at], 0)
            chain[k] = ch
        for k in range(int(c_len.max()), 1, -1):
            # the context listed at length k: its suffix of length k-1
            at = c_len >= k
            chain[k - 1][at] = u.suffix[k][chain[k][at]]
        K = int(c_len.max())
        # each component's exact log10 p(x | n-gram's context) for the union's n-grams
        full = []
        for m in range(M):
            f = [np.where(u.listed[m][0], u.prob[m][0], u.prob[m][0][0]).astype(np.float64)]
            for n in range(2, N + 1):
                f.append(np.where(u.listed[m][n - 1], u.prob[m][n - 1].astype(np.float64),
                                  f[n - 2][u.suffix[n]] + u.backoff[m][n - 2][u.prefix[n]]))
            full.append(f)
        # cumulative back-offs: bcum[m][k][c] = sum of b_m of the suffixes of length 1..k
        bcum = np.zeros((M, K + 1, C))
        for m in range(M):
            for k in range(1, K + 1):
                b = np.zeros(C)
                at = chain[k] >= 0
                b[at] = u.backoff[m][k - 1][chain[k][at]]
                bcum[m, k] = bcum[m, k - 1] + b
        total = bcum[:, K, :]
        self.ln_backoff = LN10 * np.array([bcum[m, np.minimum(c_len, K), np.arange(C)] for m in range(M)]).T
        self.ln_uni = LN10 * np.array([full[m][0] for m in range(M)]).T      # (V, M)
        self.ln_uni[bos] = 0.0
        # last word of each n-gram, per order
        last = {1: np.arange(V, dtype=np.int64)}
        for n in range(2, N + 1):
            last[n] = last[n - 1][u.suffix[n]]
        # extensions, a chunk of contexts at a time (bounded temporaries): the
        # words after the last word (level 1), values overwritten by deeper levels
        ranges = {}
        for k in range(1, min(K, N - 1) + 1):
            g = u.by_context[k + 1]
            pref = u.prefix[k + 1][g]
            have = chain[k] >= 0
            lo = np.zeros(C, dtype=np.int64)
            hi = np.zeros(C, dtype=np.int64)
            lo[have] = np.searchsorted(pref, chain[k][have], "left")
            hi[have] = np.searchsorted(pref, chain[k][have], "right")
            ranges[k] = (g, lo, hi)
        per_ctx = ranges[1][2] - ranges[1][1] if 1 in ranges else np.zeros(C, dtype=np.int64)
        self._indptr = np.concatenate([[0], np.cumsum(per_ctx)])
        E = int(self._indptr[-1])
        self.ent_word = np.empty(E, dtype=np.int32)
        self.ent_cols = [np.empty(E, dtype=np.float32) for _ in range(M)]   # (float32, as KenLM)
        self._incidence = None
        obs = self.ln_uni[words] + self.ln_backoff[inv]
        budget = 1 << 22
        c0 = 0
        while c0 < C:
            c1 = max(c0 + 1, int(np.searchsorted(self._indptr, self._indptr[c0] + budget, "right")) - 1)
            c1 = min(c1, C)
            base = int(self._indptr[c0])
            ent_key = ent_val = None
            for k in ranges:
                g, lo, hi = ranges[k]
                cs = np.arange(c0, c1)[hi[c0:c1] > lo[c0:c1]]
                per = hi[cs] - lo[cs]
                owner = np.repeat(cs, per)
                starts = np.repeat(lo[cs] - np.concatenate([[0], np.cumsum(per)[:-1]]), per)
                j = g[starts + np.arange(len(owner))]
                word = last[k + 1][j]
                rest = np.minimum(c_len[owner], K)
                val = np.stack([full[m][k][j] + bcum[m, rest, owner] - bcum[m, k, owner] for m in range(M)],
                               axis=1) * LN10
                if k == 1:
                    ent_key, ent_val = owner * V + word, val
                    self.ent_word[base:base + len(word)] = word
                elif len(owner):
                    ent_val[np.searchsorted(ent_key, owner * V + word)] = val
            if ent_val is not None:
                for m in range(M):
                    self.ent_cols[m][base:base + len(ent_val)] = ent_val[:, m]
                # observed: a token's word among its context's extensions
                tok = np.flatnonzero((inv >= c0) & (inv < c1))
                key = inv[tok] * V + words[tok]
                p = np.minimum(np.searchsorted(ent_key, key), max(len(ent_key) - 1, 0))
                inside = ent_key[p] == key if len(ent_key) else np.zeros(len(tok), bool)
                obs[tok[inside]] = ent_val[p[inside]]
            c0 = c1
        del total
        self.observed = obs.sum(axis=0)
        self.instances = T

    def derivatives(self, w):  # long: the sums of KenLM's Derivatives, one after another
        """(perplexity, gradient, Hessian) of the tuning text at weights ``w``."""
        w = np.asarray(w, dtype=np.float64)
        M = len(w)
        C = len(self.count)
        pairs = [(i, j) for i in range(M) for j in range(i, M)]
        U = self.ln_uni
        wu = np.exp(U @ w)
        wu[self.bos] = 0.0
        z_eps = wu.sum()
        ucross = U.T @ wu / z_eps
        uu = (U * wu[:, None]).T @ U / z_eps
        # sums over each context's extensions of the unigram terms (they depend on the
        # word only): one sparse product of the context-by-word incidence
        if self._incidence is None:
            E = len(self.ent_word)
            self._incidence = csr_matrix((np.ones(E), self.ent_word, self._indptr), shape=(C, len(wu)))
        cols = [wu] + [wu * U[:, i] for i in range(M)] + [wu * U[:, i] * U[:, j] for i, j in pairs]
        S = np.asarray(self._incidence @ np.column_stack(cols))
        S_a, S_aU = S[:, 0], S[:, 1:1 + M]
        S_aUU = np.empty((C, M, M))
        for c, (i, j) in enumerate(pairs):
            S_aUU[:, i, j] = S_aUU[:, j, i] = S[:, 1 + M + c]
        # and of the extensions' own terms, entry by entry
        L = self.ent_cols
        lw = np.zeros(len(self.ent_word))
        for i in range(M):
            lw += w[i] * L[i]
        g = np.exp(lw, out=lw)
        nonempty = self._indptr[1:] > self._indptr[:-1]
        st = self._indptr[:-1][nonempty]

        def per_ctx(x):
            out = np.zeros(C)
            if len(st):
                out[nonempty] = np.add.reduceat(x, st)
            return out

        S_g = per_ctx(g)
        gL = [g * L[i] for i in range(M)]
        S_gL = np.column_stack([per_ctx(x) for x in gL]) if M else np.zeros((C, 0))
        S_gLL = np.empty((C, M, M))
        for i, j in pairs:
            S_gLL[:, i, j] = S_gLL[:, j, i] = per_ctx(gL[i] * L[j])
        del gL, g
        lnb = self.ln_backoff                              # (C, M)
        wb = np.exp(lnb @ w)
        Z = wb * (z_eps - S_a) + S_g
        # words outside the extensions back off to the unigrams: ln p_i = U + lnb
        sum_f_back = z_eps * (ucross[None, :] + lnb) - (S_aU + S_a[:, None] * lnb)
        E1 = (wb[:, None] * sum_f_back + S_gL) / Z[:, None]
        outer_b = lnb[:, :, None] * lnb[:, None, :]
        cross = ucross[None, :, None] * lnb[:, None, :]
        all_back = z_eps * (uu[None] + cross + cross.transpose(0, 2, 1) + outer_b)
        ext_back = S_aUU + (S_aU[:, :, None] * lnb[:, None, :]) + (lnb[:, :, None] * S_aU[:, None, :]) \
            + S_a[:, None, None] * outer_b
        E2 = (wb[:, None, None] * (all_back - ext_back) + S_gLL) / Z[:, None, None]
        cov = E2 - E1[:, :, None] * E1[:, None, :]
        cnt = self.count
        grad = (cnt[:, None] * E1).sum(axis=0) - self.observed
        hess = (cnt[:, None, None] * cov).sum(axis=0)
        ppl = math.exp((-(self.observed @ w) + float(cnt @ np.log(Z))) / self.instances)
        return ppl, grad, hess


def tune(u, path, say=None, names=None):
    """Weights minimising the tuning text's perplexity as KenLM's interpolate -t finds
    them: float32 weights after ten Newton steps of 0.7 from uniform weights.
    ``names``: the models as the progress lines call them."""
    say = say or (lambda line: None)
    words, bounds = read_tuning(path, u)
    names = names or [c.name for c in u.components]
    for i, name in enumerate(names):
        say(f"Processing model {i}/{len(names)}: {name}")
    ts = TuningSet(u, words, bounds)
    M = len(u.components)
    w = np.full(M, 1.0 / M)
    for it in range(TUNE_ITERATIONS):
        say(f"Iteration {it}: weights =" + "".join(f" {x:g}" for x in np.float32(w)))
        ppl, grad, hess = ts.derivatives(w)
        say(f"Perplexity = {ppl:g}")
        w = w - TUNE_STEP * np.linalg.solve(hess, grad)
    return w.astype(np.float32)
