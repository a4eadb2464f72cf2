# Forward/backward kernels of the feed-forward neural n-gram model.
#
# The Python layer (nplm/neural/network.py) owns every array; an ``Engine`` keeps raw pointers
# to them in a ``Net`` struct and runs whole minibatches without the GIL.  The same
# code is instantiated for float32 (training) and float64 (gradient checks) through the
# fused type ``real``: the struct holds ``void*`` and each kernel casts to its type.
#
# Declarations and math helpers are in _train.pxd, the noise samplers in _noise.pyx.
# Matrices are row-major; ``gemm`` (_train.pxd) maps row-major products onto column-major BLAS.
# Per-example work runs in ``prange``; every write shared between examples (embedding and
# output-row gradients) happens in a serial loop or a BLAS call, so results do not
# depend on the number of threads.
from cython.parallel cimport prange
from libc.math cimport exp, log, sqrt, tanh
from libc.stdint cimport uint64_t, int64_t
from libc.string cimport memset, memcpy

import numpy as np

from nplm.neural import _blas
from nplm.neural._netdefs cimport CTX_FULL, ACT_RELU, ACT_TANH, ACT_IDENTITY, OUT_SOFTMAX, OUT_CLASS, OUT_TREE

# Parameter slots, in this order everywhere (Python passes lists in the same order).
PARAM_NAMES = ("emb", "ctx", "b0", "w1", "b1", "w2", "b2", "out_w", "out_b", "cls_w", "cls_b")

WORK_NAMES = ("X", "A0", "A1", "A2", "D0", "D1", "D2", "M0", "M1", "M2", "dX", "S", "S2",
              "Hs", "dHs", "Wn", "dWn", "loss", "tmp", "MX", "U")


# ---------------------------------------------------------------- forward

cdef void activate(real* Z, real* M, int B, int n, int act, double dropout, uint64_t seed,
                   int nthreads) noexcept nogil:
    """Z := mask * act(Z) in place; M := mask (0 or 1/(1-p)) when dropout > 0."""
    cdef int b, j
    cdef real* z
    cdef real keep = <real>(1.0 / (1.0 - dropout)) if dropout > 0 else 1
    cdef uint64_t h, thr = <uint64_t>(dropout * 18446744073709551615.0) if dropout > 0 else 0
    for b in prange(B, nogil=True, schedule='static', num_threads=nthreads):
        z = Z + <int64_t>b * n
        if act == ACT_RELU:
            for j in range(n):
                if z[j] < 0:
                    z[j] = 0
        elif act == ACT_TANH:
            for j in range(n):
                z[j] = tanh(z[j])
        if dropout > 0:
            for j in range(n):
                h = mix64(seed ^ mix64(<uint64_t>b * n + j + 1))
                if h < thr:
                    M[<int64_t>b * n + j] = 0
                    z[j] = 0
                else:
                    M[<int64_t>b * n + j] = keep
                    z[j] = z[j] * keep


cdef void add_bias(real* Z, const real* bias, int B, int n, int nthreads) noexcept nogil:
    cdef int b
    for b in prange(B, nogil=True, schedule='static', num_threads=nthreads):
        axpy(<real>1, bias, Z + <int64_t>b * n, n)


cdef bint group_positions(Net* net, int B, const int* ctx) noexcept nogil:
    """Fill uniq/ustart/uinv with each context position's distinct words.  True when they
    are few enough for the grouped first layer to pay: under 9/10 of the examples.  On
    network (a), one thread, grouping gained 35% at 1000 examples (46% distinct), 16% at
    128 (74%), and nothing, but lost nothing either, at 32 (about 90%)."""
    cdef int m = net.m, j, b, w, s, i, tot = 0
    for j in range(m):
        net.ustart[j] = tot
        for b in range(B):
            w = ctx[b * m + j]
            s = net.uslot[w]
            if s < 0:
                s = tot - net.ustart[j]
                net.uslot[w] = s
                net.uniq[tot] = w
                tot += 1
            net.uinv[b * m + j] = s
        for i in range(net.ustart[j], tot):
            net.uslot[net.uniq[i]] = -1
    net.ustart[m] = tot
    return 10 * tot < 9 * B * m


cdef void forward_grouped(Net* net, int B, real tag) noexcept nogil:
    """A0 := X . C for full contexts, one product per position over its distinct words:
    a word repeated in the batch is multiplied once (about half the first layer's FLOPs
    at 1000 examples of PTB).  X holds the distinct words' embeddings, packed."""
    cdef int m = net.m, d = net.d, r0 = net.r0, j, b, u, U, lo
    cdef const real* emb = <real*>net.p[P_EMB]
    cdef const real* cw = <real*>net.p[P_CTX]
    cdef real* X = <real*>net.w[W_X]
    cdef real* A0 = <real*>net.w[W_A0]
    cdef real* P = <real*>net.w[W_U]
    for u in prange(net.ustart[m], nogil=True, schedule='static', num_threads=net.nthreads):
        memcpy(X + <int64_t>u * d, emb + <int64_t>net.uniq[u] * d, d * sizeof(real))
    for j in range(m):
        lo = net.ustart[j]
        U = net.ustart[j + 1] - lo
        gemm(False, False, U, r0, d, <real>1, X + <int64_t>lo * d, d, cw + <int64_t>j * d * r0, r0,
             <real>0, P, r0)
        for b in prange(B, nogil=True, schedule='static', num_threads=net.nthreads):
            if j == 0:
                memcpy(A0 + <int64_t>b * r0, P + <int64_t>net.uinv[b * m] * r0, r0 * sizeof(real))
            else:
                axpy(<real>1, P + <int64_t>net.uinv[b * m + j] * r0, A0 + <int64_t>b * r0, r0)


cdef void backward_grouped(Net* net, int B, real tag) noexcept nogil:
    """The gradients of forward_grouped: each position's rows of D0 are first summed per
    distinct word, then both products run over the distinct words only."""
    cdef int m = net.m, d = net.d, r0 = net.r0, j, b, u, U, lo, c, i, w, i0, i1
    cdef int nt = net.nthreads
    cdef const real* cw = <real*>net.p[P_CTX]
    cdef real* g_emb = <real*>net.g[P_EMB]
    cdef real* g_cw = <real*>net.g[P_CTX]
    cdef const real* X = <real*>net.w[W_X]
    cdef const real* D0 = <real*>net.w[W_D0]
    cdef real* dX = <real*>net.w[W_DX]
    cdef real* P = <real*>net.w[W_U]
    cdef const real* src
    cdef real* dst
    for j in range(m):
        lo = net.ustart[j]
        U = net.ustart[j + 1] - lo
        memset(P, 0, <int64_t>U * r0 * sizeof(real))
        # the scatter-add, split by columns so threads never share a row
        for c in prange(nt, nogil=True, schedule='static', num_threads=nt):
            i0 = c * r0 // nt
            i1 = (c + 1) * r0 // nt
            for b in range(B):
                src = D0 + <int64_t>b * r0
                dst = P + <int64_t>net.uinv[b * m + j] * r0
                for i in range(i0, i1):
                    dst[i] = dst[i] + src[i]
        gemm(True, False, d, r0, U, <real>1, X + <int64_t>lo * d, d, P, r0, <real>1,
             g_cw + <int64_t>j * d * r0, r0)
        gemm(False, True, U, d, r0, <real>1, P, r0, cw + <int64_t>j * d * r0, r0, <real>0, dX, d)
        for u in range(U):
            w = net.uniq[lo + u]
            net.mark_emb[w] = 1
            axpy(<real>1, dX + <int64_t>u * d, g_emb + <int64_t>w * d, d)


cdef void forward_dense_input(Net* net, int B, const int* ctx, uint64_t seed, real tag) noexcept nogil:
    """A0 from the embeddings copied out per example (X), with input dropout (mask in MX)."""
    cdef int m = net.m, d = net.d, r0 = net.r0, b, j, i
    cdef const real* emb = <real*>net.p[P_EMB]
    cdef const real* cw = <real*>net.p[P_CTX]
    cdef real* X = <real*>net.w[W_X]
    cdef real* A0 = <real*>net.w[W_A0]
    cdef const real* e
    cdef real* a
    # X[b] = [emb[w_1] ... emb[w_m]], with input dropout applied (mask kept in MX)
    for b in prange(B, nogil=True, schedule='static', num_threads=net.nthreads):
        for j in range(m):
            memcpy(X + <int64_t>b * m * d + j * d, emb + <int64_t>ctx[b * m + j] * d, d * sizeof(real))
    if net.in_drop > 0:
        activate(X, <real*>net.w[W_MX], B, m * d, ACT_IDENTITY, net.in_drop, seed + 11, net.nthreads)
    if net.ctx_kind == CTX_FULL:
        # A0 = X . C  (C is (m*d, r0))
        gemm(False, False, B, r0, m * d, <real>1, X, m * d, cw, r0, <real>0, A0, r0)
    else:
        # A0[b] = sum_j c_j (.) x_j
        for b in prange(B, nogil=True, schedule='static', num_threads=net.nthreads):
            a = A0 + <int64_t>b * d
            memset(a, 0, d * sizeof(real))
            for j in range(m):
                e = X + <int64_t>b * m * d + j * d
                for i in range(d):
                    a[i] = a[i] + cw[j * d + i] * e[i]


cdef void forward(Net* net, int B, const int* ctx, double dropout, uint64_t seed, real tag) noexcept nogil:
    """Hidden layers for B contexts: fills X (full contexts), A0.. and masks."""
    cdef int r0 = net.r0
    cdef real* A0 = <real*>net.w[W_A0]
    cdef real* A1 = <real*>net.w[W_A1]
    cdef real* A2 = <real*>net.w[W_A2]
    net.grouped = net.ctx_kind == CTX_FULL and net.in_drop == 0 and group_positions(net, B, ctx)
    if net.grouped:
        forward_grouped(net, B, tag)
    else:
        forward_dense_input(net, B, ctx, seed, tag)
    add_bias(A0, <real*>net.p[P_B0], B, r0, net.nthreads)
    activate(A0, <real*>net.w[W_M0], B, r0, net.act, dropout, seed + 1, net.nthreads)
    if net.n_dense >= 1:
        gemm(False, False, B, net.h1, r0, <real>1, A0, r0, <real*>net.p[P_W1], net.h1, <real>0, A1, net.h1)
        add_bias(A1, <real*>net.p[P_B1], B, net.h1, net.nthreads)
        activate(A1, <real*>net.w[W_M1], B, net.h1, net.act, dropout, seed + 2, net.nthreads)
    if net.n_dense >= 2:
        gemm(False, False, B, net.h2, net.h1, <real>1, A1, net.h1, <real*>net.p[P_W2], net.h2, <real>0, A2, net.h2)
        add_bias(A2, <real*>net.p[P_B2], B, net.h2, net.nthreads)
        activate(A2, <real*>net.w[W_M2], B, net.h2, net.act, dropout, seed + 3, net.nthreads)


cdef inline real* top(Net* net, real tag) noexcept nogil:
    """The last hidden layer H (B, r)."""
    if net.n_dense == 2:
        return <real*>net.w[W_A2]
    if net.n_dense == 1:
        return <real*>net.w[W_A1]
    return <real*>net.w[W_A0]


cdef inline real* dtop(Net* net, real tag) noexcept nogil:
    if net.n_dense == 2:
        return <real*>net.w[W_D2]
    if net.n_dense == 1:
        return <real*>net.w[W_D1]
    return <real*>net.w[W_D0]


# ---------------------------------------------------------------- backward

cdef void act_backward(real* D, const real* A, const real* M, int B, int n, int act, double dropout,
                       int nthreads) noexcept nogil:
    """D := D * mask * act'(A) (A is the post-activation, post-mask value)."""
    cdef int b, j
    cdef real* dd
    cdef const real* a
    for b in prange(B, nogil=True, schedule='static', num_threads=nthreads):
        dd = D + <int64_t>b * n
        a = A + <int64_t>b * n
        if dropout > 0:
            for j in range(n):
                dd[j] = dd[j] * M[<int64_t>b * n + j]
        if act == ACT_RELU:
            for j in range(n):
                if a[j] <= 0:
                    dd[j] = 0
        elif act == ACT_TANH:
            # a = mask * tanh(z): recover tanh(z) where the unit was kept
            if dropout > 0:
                for j in range(n):
                    if M[<int64_t>b * n + j] != 0:
                        dd[j] = dd[j] * (1 - (a[j] / M[<int64_t>b * n + j]) * (a[j] / M[<int64_t>b * n + j]))
            else:
                for j in range(n):
                    dd[j] = dd[j] * (1 - a[j] * a[j])


cdef void colsum_add(const real* D, real* out, int B, int n) noexcept nogil:
    """out[j] += sum_b D[b, j]"""
    cdef int b
    for b in range(B):
        axpy(<real>1, D + <int64_t>b * n, out, n)


cdef void backward(Net* net, int B, const int* ctx, double dropout, real tag) noexcept nogil:
    """From dH (in the D slot of the top layer) down to the parameter gradients."""
    # (One function: each layer's step reads the one above's deltas in place, top to bottom.)
    cdef int m = net.m, d = net.d, r0 = net.r0, b, j, i, w
    cdef real* D0 = <real*>net.w[W_D0]
    cdef real* D1 = <real*>net.w[W_D1]
    cdef real* D2 = <real*>net.w[W_D2]
    cdef real* A0 = <real*>net.w[W_A0]
    cdef real* A1 = <real*>net.w[W_A1]
    cdef real* A2 = <real*>net.w[W_A2]
    cdef const real* cw = <real*>net.p[P_CTX]
    cdef real* g_emb = <real*>net.g[P_EMB]
    cdef real* g_cw = <real*>net.g[P_CTX]
    cdef real* dX = <real*>net.w[W_DX]
    cdef real* X = <real*>net.w[W_X]
    cdef real* dz
    cdef const real* e
    if net.n_dense >= 2:
        act_backward(D2, A2, <real*>net.w[W_M2], B, net.h2, net.act, dropout, net.nthreads)
        colsum_add(D2, <real*>net.g[P_B2], B, net.h2)
        gemm(True, False, net.h1, net.h2, B, <real>1, A1, net.h1, D2, net.h2, <real>1, <real*>net.g[P_W2], net.h2)
        gemm(False, True, B, net.h1, net.h2, <real>1, D2, net.h2, <real*>net.p[P_W2], net.h2, <real>0, D1, net.h1)
    if net.n_dense >= 1:
        act_backward(D1, A1, <real*>net.w[W_M1], B, net.h1, net.act, dropout, net.nthreads)
        colsum_add(D1, <real*>net.g[P_B1], B, net.h1)
        gemm(True, False, r0, net.h1, B, <real>1, A0, r0, D1, net.h1, <real>1, <real*>net.g[P_W1], net.h1)
        gemm(False, True, B, r0, net.h1, <real>1, D1, net.h1, <real*>net.p[P_W1], net.h1, <real>0, D0, r0)
    act_backward(D0, A0, <real*>net.w[W_M0], B, r0, net.act, dropout, net.nthreads)
    colsum_add(D0, <real*>net.g[P_B0], B, r0)
    cdef const real* MX = <real*>net.w[W_MX]
    cdef bint masked = net.in_drop > 0
    if net.grouped:
        backward_grouped(net, B, tag)
    elif net.ctx_kind == CTX_FULL:
        gemm(True, False, m * d, r0, B, <real>1, X, m * d, D0, r0, <real>1, g_cw, r0)
        gemm(False, True, B, m * d, r0, <real>1, D0, r0, cw, r0, <real>0, dX, m * d)
        if masked:
            for b in prange(B, nogil=True, schedule='static', num_threads=net.nthreads):
                for i in range(m * d):
                    dX[<int64_t>b * m * d + i] = dX[<int64_t>b * m * d + i] * MX[<int64_t>b * m * d + i]
        for b in range(B):
            for j in range(m):
                w = ctx[b * m + j]
                net.mark_emb[w] = 1
                axpy(<real>1, dX + <int64_t>b * m * d + j * d, g_emb + <int64_t>w * d, d)
    else:
        # g_c[j] = sum_b x_bj (.) D0[b];  g_emb[w_bj] += mask_bj (.) c_j (.) D0[b]
        for j in prange(m, nogil=True, schedule='static', num_threads=net.nthreads):
            for b in range(B):
                e = X + <int64_t>b * m * d + j * d
                dz = D0 + <int64_t>b * d
                for i in range(d):
                    g_cw[j * d + i] = g_cw[j * d + i] + e[i] * dz[i]
        for b in range(B):
            dz = D0 + <int64_t>b * d
            for j in range(m):
                w = ctx[b * m + j]
                net.mark_emb[w] = 1
                e = cw + j * d
                if masked:
                    for i in range(d):
                        g_emb[<int64_t>w * d + i] = g_emb[<int64_t>w * d + i] + \
                            e[i] * dz[i] * MX[<int64_t>b * m * d + j * d + i]
                else:
                    for i in range(d):
                        g_emb[<int64_t>w * d + i] = g_emb[<int64_t>w * d + i] + e[i] * dz[i]


# ---------------------------------------------------------------- output layers

cdef void softmax_rows(real* S, int B, int n, int ld, const int* tgt, real* loss, real gscale,
                       bint grad, int nthreads) noexcept nogil:
    """Per row b: loss[b] += logsumexp(S[b]) - S[b, tgt[b]]; with grad, S[b] := gscale *
    (softmax(S[b]) - onehot(tgt[b])) (otherwise S is left overwritten)."""
    cdef int b, j
    cdef real* s
    cdef real mx
    cdef double tot, st
    for b in prange(B, nogil=True, schedule='static', num_threads=nthreads):
        s = S + <int64_t>b * ld
        st = s[tgt[b]]
        mx = row_max(s, n)
        exp_shift(s, n, mx)
        tot = row_sum(s, n)
        loss[b] = loss[b] + mx + log(tot) - st
        if grad:
            for j in range(n):
                s[j] = s[j] * <real>(gscale / tot)
            s[tgt[b]] = s[tgt[b]] - gscale


cdef void nce_block(int n, int r, int k, const real* H, real* dH, const int* trow,
                    const int* noise, const real* W, const real* bias, const real* logkq,
                    real* gW, real* gb, unsigned char* mark, real* Wn, real* dWn, real* S,
                    real* loss, real gscale, bint grad, int nthreads) noexcept nogil:
    """NCE for n examples (hidden H (n, r)) with targets at rows trow of W and k noise
    rows shared by all of them.  The model score is s = W[row].h + bias[row] (log-normaliser
    fixed at 0); the classifier logit is s - log(k q(row)).  Adds to loss[i], to dH
    (when grad) and to gW/gb (scatter, serial)."""
    cdef int i, j, t
    cdef double delta, sg, lossi
    cdef real* s
    # gather noise rows so that all n x k noise scores are one gemm
    for j in range(k):
        memcpy(Wn + <int64_t>j * r, W + <int64_t>noise[j] * r, r * sizeof(real))
    gemm(False, True, n, k, r, <real>1, H, r, Wn, r, <real>0, S, k)
    for i in prange(n, nogil=True, schedule='static', num_threads=nthreads):
        t = trow[i]
        delta = dot(H + <int64_t>i * r, W + <int64_t>t * r, r) + bias[t] - logkq[t]
        lossi = softplus(-delta)
        sg = sigmoid(delta) - 1
        if grad:
            for j in range(r):
                dH[<int64_t>i * r + j] = dH[<int64_t>i * r + j] + gscale * sg * W[<int64_t>t * r + j]
        s = S + <int64_t>i * k
        for j in range(k):
            delta = s[j] + bias[noise[j]] - logkq[noise[j]]
            lossi = lossi + softplus(delta)
            s[j] = gscale * sigmoid(delta)
        loss[i] = loss[i] + lossi
    if not grad:
        return
    # dH += dS . Wn ; dWn = dS^T . H
    gemm(False, False, n, r, k, <real>1, S, k, Wn, r, <real>1, dH, r)
    gemm(True, False, k, r, n, <real>1, S, k, H, r, <real>0, dWn, r)
    for j in range(k):
        t = noise[j]
        mark[t] = 1
        axpy(<real>1, dWn + <int64_t>j * r, gW + <int64_t>t * r, r)
        for i in range(n):
            gb[t] = gb[t] + S[<int64_t>i * k + j]
    for i in range(n):
        t = trow[i]
        mark[t] = 1
        delta = dot(H + <int64_t>i * r, W + <int64_t>t * r, r) + bias[t] - logkq[t]
        sg = gscale * (sigmoid(delta) - 1)
        axpy(<real>sg, H + <int64_t>i * r, gW + <int64_t>t * r, r)
        gb[t] = gb[t] + sg


cdef void output_softmax(Net* net, int B, const int* tgt, const int* noise, const real* logkq,
                         real* loss, real gscale, bint grad, bint nce) noexcept nogil:
    cdef int r = net.r, V = net.V
    cdef real* H = top(net, gscale)
    cdef real* dH = dtop(net, gscale)
    cdef real* S = <real*>net.w[W_S]
    cdef const real* W = <real*>net.p[P_OW]
    cdef const real* bias = <real*>net.p[P_OB]
    if grad:
        memset(dH, 0, <int64_t>B * r * sizeof(real))
    if nce:
        nce_block(B, r, net.k, H, dH, tgt, noise, W, bias, logkq, <real*>net.g[P_OW], <real*>net.g[P_OB],
                  net.mark_out, <real*>net.w[W_WN], <real*>net.w[W_DWN], S, loss, gscale, grad, net.nthreads)
        return
    gemm(False, True, B, V, r, <real>1, H, r, W, r, <real>0, S, V)
    add_bias(S, bias, B, V, net.nthreads)
    softmax_rows(S, B, V, V, tgt, loss, gscale, grad, net.nthreads)
    if grad:
        gemm(False, False, B, r, V, <real>1, S, V, W, r, <real>0, dH, r)
        gemm(True, False, V, r, B, <real>1, S, V, H, r, <real>1, <real*>net.g[P_OW], r)
        colsum_add(S, <real*>net.g[P_OB], B, V)
        memset(net.mark_out, 1, V)


cdef void sort_by_class(Net* net, int B, const int* tgt) noexcept nogil:
    """net.order := examples grouped by the class of their target; cls_count[c] := start."""
    cdef int b, c, C = net.C
    memset(net.cls_count, 0, (C + 1) * sizeof(int))
    for b in range(B):
        net.cls_count[net.word_class[tgt[b]] + 1] += 1
    for c in range(C):
        net.cls_count[c + 1] += net.cls_count[c]
    for b in range(B):
        c = net.word_class[tgt[b]]
        net.order[net.cls_count[c]] = b
        net.cls_count[c] += 1
    for c in range(C, 0, -1):
        net.cls_count[c] = net.cls_count[c - 1]
    net.cls_count[0] = 0


cdef void output_class(Net* net, int B, const int* tgt, const int* cnoise, const real* clogkq,
                       const int* wnoise, const real* wlogkq, real* loss, real gscale, bint grad,
                       bint nce) noexcept nogil:
    """Class-factored output: p(w|h) = p(c|h) p(w|c,h), both softmaxes (MLE) or both
    trained by NCE (Baltescu & Blunsom section 2.3).  out_w rows are in class order, so
    the words of one class are a contiguous block and each class is one gemm."""
    # (One function: the class step and the per-class word steps share H, dH and the sorted rows.)
    cdef int r = net.r, C = net.C, k = net.k, b, i, c, n, lo, nw
    cdef real* H = top(net, gscale)
    cdef real* dH = dtop(net, gscale)
    cdef real* S = <real*>net.w[W_S]
    cdef real* Hs = <real*>net.w[W_HS]
    cdef real* dHs = <real*>net.w[W_DHS]
    cdef real* ls = <real*>net.w[W_TMP]
    cdef int* rows = <int*>net.w[W_S2]
    cdef const real* W = <real*>net.p[P_OW]
    cdef const real* bias = <real*>net.p[P_OB]
    cdef const real* CW = <real*>net.p[P_CW]
    cdef const real* cb = <real*>net.p[P_CB]
    cdef int* ctgt = <int*>(<real*>net.w[W_TMP] + B)
    for b in range(B):
        ctgt[b] = net.word_class[tgt[b]]
    if grad:
        memset(dH, 0, <int64_t>B * r * sizeof(real))
    # -- class level
    if nce:
        nce_block(B, r, k, H, dH, ctgt, cnoise, CW, cb, clogkq, <real*>net.g[P_CW], <real*>net.g[P_CB],
                  net.mark_out + net.n_out_rows, <real*>net.w[W_WN], <real*>net.w[W_DWN], S, loss, gscale,
                  grad, net.nthreads)
    else:
        gemm(False, True, B, C, r, <real>1, H, r, CW, r, <real>0, S, C)
        add_bias(S, cb, B, C, net.nthreads)
        softmax_rows(S, B, C, C, ctgt, loss, gscale, grad, net.nthreads)
        if grad:
            gemm(False, False, B, r, C, <real>1, S, C, CW, r, <real>1, dH, r)
            gemm(True, False, C, r, B, <real>1, S, C, H, r, <real>1, <real*>net.g[P_CW], r)
            colsum_add(S, <real*>net.g[P_CB], B, C)
    # -- word level, one block of examples per class
    sort_by_class(net, B, tgt)
    for i in range(B):
        b = net.order[i]
        memcpy(Hs + <int64_t>i * r, H + <int64_t>b * r, r * sizeof(real))
        rows[i] = net.word_pos[tgt[b]]
        ls[i] = 0
    if grad:
        memset(dHs, 0, <int64_t>B * r * sizeof(real))
    for c in range(C):
        lo = net.cls_count[c]
        n = net.cls_count[c + 1] - lo
        if n == 0:
            continue
        nw = net.class_start[c + 1] - net.class_start[c]
        if nce:
            nce_block(n, r, k, Hs + <int64_t>lo * r, dHs + <int64_t>lo * r, rows + lo, wnoise + <int64_t>c * k,
                      W, bias, wlogkq, <real*>net.g[P_OW], <real*>net.g[P_OB], net.mark_out,
                      <real*>net.w[W_WN], <real*>net.w[W_DWN], S, ls + lo, gscale, grad, net.nthreads)
            continue
        # rows relative to the class block
        for i in range(n):
            rows[lo + i] -= net.class_start[c]
        gemm(False, True, n, nw, r, <real>1, Hs + <int64_t>lo * r, r, W + <int64_t>net.class_start[c] * r, r,
             <real>0, S, nw)
        for i in range(n):
            axpy(<real>1, bias + net.class_start[c], S + <int64_t>i * nw, nw)
        softmax_rows(S, n, nw, nw, rows + lo, ls + lo, gscale, grad, 1)
        if grad:
            gemm(False, False, n, r, nw, <real>1, S, nw, W + <int64_t>net.class_start[c] * r, r, <real>0,
                 dHs + <int64_t>lo * r, r)
            gemm(True, False, nw, r, n, <real>1, S, nw, Hs + <int64_t>lo * r, r, <real>1,
                 <real*>net.g[P_OW] + <int64_t>net.class_start[c] * r, r)
            colsum_add(S, <real*>net.g[P_OB] + net.class_start[c], n, nw)
            memset(net.mark_out + net.class_start[c], 1, nw)
    for i in range(B):
        b = net.order[i]
        loss[b] = loss[b] + ls[i]
        if grad:
            axpy(<real>1, dHs + <int64_t>i * r, dH + <int64_t>b * r, r)


cdef void output_tree(Net* net, int B, const int* tgt, real* loss, real gscale, bint grad) noexcept nogil:
    """Binary tree (Huffman) output: p(w|h) = prod over the path of sigmoid(+-(T[node].h +
    t[node])), code 1 meaning the sigmoid of +score."""
    cdef int r = net.r, L = net.max_len, b, l, node, t
    cdef real* H = top(net, gscale)
    cdef real* dH = dtop(net, gscale)
    cdef real* DS = <real*>net.w[W_S]       # (B, L) score gradients
    cdef const real* T = <real*>net.p[P_OW]
    cdef const real* tb = <real*>net.p[P_OB]
    cdef real* gT = <real*>net.g[P_OW]
    cdef real* gtb = <real*>net.g[P_OB]
    cdef double s, lossb, code
    for b in prange(B, nogil=True, schedule='static', num_threads=net.nthreads):
        t = tgt[b]
        lossb = 0
        if grad:
            memset(dH + <int64_t>b * r, 0, r * sizeof(real))
        for l in range(net.lengths[t]):
            node = net.points[<int64_t>t * L + l]
            code = net.codes[<int64_t>t * L + l]
            s = dot(H + <int64_t>b * r, T + <int64_t>node * r, r) + tb[node]
            if code != 0:
                lossb = lossb + softplus(-s)
            else:
                lossb = lossb + softplus(s)
            if grad:
                DS[<int64_t>b * L + l] = gscale * (sigmoid(s) - code)
                axpy(DS[<int64_t>b * L + l], T + <int64_t>node * r, dH + <int64_t>b * r, r)
        loss[b] = loss[b] + lossb
    if grad:
        for b in range(B):
            t = tgt[b]
            for l in range(net.lengths[t]):
                node = net.points[<int64_t>t * L + l]
                net.mark_out[node] = 1
                axpy(DS[<int64_t>b * L + l], H + <int64_t>b * r, gT + <int64_t>node * r, r)
                gtb[node] = gtb[node] + DS[<int64_t>b * L + l]


# ---------------------------------------------------------------- updates

cdef void update_block(real* p, real* g, real* acc, int64_t n, double lr, double l2, bint adagrad,
                       bint clear) noexcept nogil:
    """p -= lr * g' (SGD) or lr * g' / sqrt(acc += g'^2) (AdaGrad), g' = g + l2 * p.
    Arithmetic in the parameters' own precision: float sqrt/div are twice as fast."""
    cdef int64_t i
    cdef real gi, rl = <real>lr, rl2 = <real>l2, eps = <real>1e-8
    if adagrad:
        for i in range(n):
            gi = g[i] + rl2 * p[i]
            acc[i] = acc[i] + gi * gi
            p[i] = p[i] - rl * gi / sqrt(acc[i] + eps)
    else:
        for i in range(n):
            p[i] = p[i] - rl * (g[i] + rl2 * p[i])
    if clear:
        memset(g, 0, n * sizeof(real))


cdef void update_rows(real* p, real* g, real* acc, unsigned char* mark, int rows, int cols, double lr,
                      double l2, bint adagrad, bint with_bias, real* pb, real* gbias, real* accb,
                      int nthreads) noexcept nogil:
    """Update only the rows touched in this batch (sparse embedding/output updates)."""
    cdef int i
    for i in prange(rows, nogil=True, schedule='static', num_threads=nthreads):
        if mark[i]:
            update_block(p + <int64_t>i * cols, g + <int64_t>i * cols, acc + <int64_t>i * cols, cols, lr, l2,
                         adagrad, True)
            if with_bias:
                update_block(pb + i, gbias + i, accb + i, 1, lr, 0, adagrad, True)
            mark[i] = 0


cdef void update_dense(real* p, real* g, real* acc, int64_t n, double lr, double l2, bint adagrad,
                       int nthreads) noexcept nogil:
    """update_block over n elements, split into one chunk per thread."""
    cdef int64_t chunk = (n + nthreads - 1) // nthreads
    cdef int c
    cdef int64_t lo, hi
    for c in prange(nthreads, nogil=True, schedule='static', num_threads=nthreads):
        lo = c * chunk
        hi = lo + chunk
        if hi > n:
            hi = n
        if lo < hi:
            update_block(p + lo, g + lo, acc + lo, hi - lo, lr, l2, adagrad, True)


cdef void run_update(Net* net, double lr, double l2, bint adagrad, real tag) noexcept nogil:
    cdef int i
    for i in range(P_CTX, P_CB + 1):
        if i == P_OW or i == P_OB or net.size[i] == 0:
            continue
        # no weight decay on biases
        update_dense(<real*>net.p[i], <real*>net.g[i], <real*>net.a[i], net.size[i], lr,
                     0.0 if (i == P_B0 or i == P_B1 or i == P_B2 or i == P_CB) else l2, adagrad, net.nthreads)
    update_rows(<real*>net.p[P_EMB], <real*>net.g[P_EMB], <real*>net.a[P_EMB], net.mark_emb, net.V_in, net.d,
                lr, l2, adagrad, False, NULL, NULL, NULL, net.nthreads)
    update_rows(<real*>net.p[P_OW], <real*>net.g[P_OW], <real*>net.a[P_OW], net.mark_out, net.n_out_rows,
                net.r, lr, l2, adagrad, True, <real*>net.p[P_OB], <real*>net.g[P_OB], <real*>net.a[P_OB],
                net.nthreads)


cdef void run_step(Net* net, int B, const int* ctx, const int* tgt, const int* noise1, const real* logkq1,
                   const int* noise2, const real* logkq2, double dropout, uint64_t seed, bint grad,
                   real gscale) noexcept nogil:
    """One minibatch: forward, output loss, and (with grad) backward into net.g.

    Softmax NCE: noise1 (k,) word rows, logkq1 = log(k q) per row.  Class NCE: noise1 (k,)
    classes with logkq1 per class, noise2 (C*k,) out_w rows sampled within each class with
    logkq2 per row.  MLE: all NULL."""
    cdef real* loss = <real*>net.w[W_LOSS]
    memset(loss, 0, B * sizeof(real))
    forward(net, B, ctx, dropout, seed, gscale)
    cdef bint nce = noise1 != NULL
    if net.out_kind == OUT_SOFTMAX:
        output_softmax(net, B, tgt, noise1, logkq1, loss, gscale, grad, nce)
    elif net.out_kind == OUT_CLASS:
        output_class(net, B, tgt, noise1, logkq1, noise2, logkq2, loss, gscale, grad, nce)
    else:
        output_tree(net, B, tgt, loss, gscale, grad)
    if grad:
        backward(net, B, ctx, dropout, gscale)


# ---------------------------------------------------------------- exact evaluation

cdef void eval_logprob(Net* net, int B, const int* tgt, real* out, bint normalised, real tag) noexcept nogil:
    """out[b] := ln p(tgt[b] | context b), exact (normalised) or, with normalised false,
    the self-normalised score (softmax: s; class: psi(c) + phi(w); tree: exact anyway).
    Expects forward() to have run without dropout."""
    cdef int b, i, c, lo, hi, r = net.r, t
    cdef real* H = top(net, tag)
    cdef real* S = <real*>net.w[W_S]
    cdef const real* W = <real*>net.p[P_OW]
    cdef const real* bias = <real*>net.p[P_OB]
    cdef const real* CW = <real*>net.p[P_CW]
    cdef const real* cb = <real*>net.p[P_CB]
    cdef double mx, tot, v
    cdef real* loss = <real*>net.w[W_LOSS]
    if net.out_kind == OUT_TREE:
        memset(loss, 0, B * sizeof(real))
        output_tree(net, B, tgt, loss, 1, False)
        for b in range(B):
            out[b] = -loss[b]
        return
    if net.out_kind == OUT_SOFTMAX:
        for b in prange(B, nogil=True, schedule='static', num_threads=net.nthreads):
            t = tgt[b]
            out[b] = dot(H + <int64_t>b * r, W + <int64_t>t * r, r) + bias[t]
        if normalised:
            gemm(False, True, B, net.V, r, <real>1, H, r, W, r, <real>0, S, net.V)
            add_bias(S, bias, B, net.V, net.nthreads)
            for b in prange(B, nogil=True, schedule='static', num_threads=net.nthreads):
                out[b] = out[b] - log_sum_exp_destroy(S + <int64_t>b * net.V, net.V)
        return
    # class factored
    gemm(False, True, B, net.C, r, <real>1, H, r, CW, r, <real>0, S, net.C)
    add_bias(S, cb, B, net.C, net.nthreads)
    for b in prange(B, nogil=True, schedule='static', num_threads=net.nthreads):
        t = net.word_pos[tgt[b]]
        c = net.word_class[tgt[b]]
        v = S[<int64_t>b * net.C + c] + dot(H + <int64_t>b * r, W + <int64_t>t * r, r) + bias[t]
        if normalised:
            mx = S[<int64_t>b * net.C]
            for i in range(net.C):
                if S[<int64_t>b * net.C + i] > mx:
                    mx = S[<int64_t>b * net.C + i]
            tot = 0
            for i in range(net.C):
                tot = tot + exp(S[<int64_t>b * net.C + i] - mx)
            v = v - mx - log(tot)
            lo = net.class_start[c]
            hi = net.class_start[c + 1]
            # the in-class scores, two passes (max, then sum) without scratch
            mx = -1e300
            for i in range(lo, hi):
                tot = dot(H + <int64_t>b * r, W + <int64_t>i * r, r) + bias[i]
                if tot > mx:
                    mx = tot
            tot = 0
            for i in range(lo, hi):
                tot = tot + exp(dot(H + <int64_t>b * r, W + <int64_t>i * r, r) + bias[i] - mx)
            v = v - mx - log(tot)
        out[b] = v


cdef void eval_distribution(Net* net, int B, real* out, real tag) noexcept nogil:
    """out (B, V) := ln p(w | context b) for every word, exact."""
    # (One function: the softmax, class and tree outputs each fill the same (B, V) rows.)
    cdef int b, i, c, l, w, r = net.r, V = net.V, L = net.max_len, rows = net.n_out_rows
    cdef real* H = top(net, tag)
    cdef real* S = <real*>net.w[W_S]
    cdef const real* W = <real*>net.p[P_OW]
    cdef const real* bias = <real*>net.p[P_OB]
    cdef double mx, tot, s, v
    cdef real* o
    cdef real* sc
    # every output row's score: (B, rows), written straight into out (rows <= V)
    gemm(False, True, B, rows, r, <real>1, H, r, W, r, <real>0, out, V)
    for b in prange(B, nogil=True, schedule='static', num_threads=net.nthreads):
        o = out + <int64_t>b * V
        axpy(<real>1, bias, o, rows)
        if net.out_kind == OUT_SOFTMAX:
            sc = S + <int64_t>b * V
            memcpy(sc, o, V * sizeof(real))
            v = log_sum_exp_destroy(sc, V)
            for i in range(V):
                o[i] = o[i] - v
        elif net.out_kind == OUT_TREE:
            # node scores live in o[0:V-1]; paths read them, so write results to S first
            sc = S + <int64_t>b * V
            for w in range(V):
                v = 0
                for l in range(net.lengths[w]):
                    s = o[net.points[<int64_t>w * L + l]]
                    if net.codes[<int64_t>w * L + l] != 0:
                        v = v - softplus(-s)
                    else:
                        v = v - softplus(s)
                sc[w] = v
            memcpy(o, sc, V * sizeof(real))
        else:
            # o holds scores in class order; normalise each class block, add log p(c)
            sc = S + <int64_t>b * V
            for c in range(net.C):
                mx = -1e300
                for i in range(net.class_start[c], net.class_start[c + 1]):
                    if o[i] > mx:
                        mx = o[i]
                tot = 0
                for i in range(net.class_start[c], net.class_start[c + 1]):
                    tot = tot + exp(o[i] - mx)
                v = mx + log(tot)
                for i in range(net.class_start[c], net.class_start[c + 1]):
                    sc[i] = o[i] - v
            for w in range(V):
                o[w] = sc[net.word_pos[w]]
    if net.out_kind == OUT_CLASS:
        # + ln p(c | h): class scores into S, log-softmax, add
        gemm(False, True, B, net.C, r, <real>1, H, r, <real*>net.p[P_CW], r, <real>0, S, net.C)
        add_bias(S, <real*>net.p[P_CB], B, net.C, net.nthreads)
        for b in prange(B, nogil=True, schedule='static', num_threads=net.nthreads):
            sc = S + <int64_t>b * net.C
            mx = sc[0]
            for c in range(net.C):
                if sc[c] > mx:
                    mx = sc[c]
            tot = 0
            for c in range(net.C):
                tot = tot + exp(sc[c] - mx)
            v = mx + log(tot)
            o = out + <int64_t>b * V
            for w in range(V):
                o[w] = o[w] + sc[net.word_class[w]] - v


# ---------------------------------------------------------------- the Python-facing engine

cdef class Engine:
    """Binds one network's parameters, gradients, optimiser state and scratch space.

    Built by nplm.neural: ``dims`` is a dict of integer sizes and kind codes; ``params``,
    ``grads`` and ``accum`` are lists of arrays in PARAM_NAMES order (all float32 or all
    float64, C-contiguous); ``work`` holds scratch arrays in WORK_NAMES order sized for
    ``bmax`` examples; ``structs`` the int32 class layout and Huffman arrays."""
    cdef Net net
    cdef bint dbl
    cdef list _keep
    cdef object _work
    cdef object mark_emb, mark_out, order, cls_count, _groups

    def __init__(self, dims, params, grads, accum, work, structs):
        cdef int i
        _blas.bind()                     # scipy's BLAS, before the first product
        self._keep = [params, grads, accum, work, structs]
        self._work = work
        self.dbl = params[0].dtype == np.float64
        want = np.float64 if self.dbl else np.float32
        n = &self.net
        n.V = dims["V"]; n.V_in = dims.get("V_in", dims["V"]); n.m = dims["m"]; n.d = dims["d"]; n.r0 = dims["r0"]
        n.h1 = dims["h1"]; n.h2 = dims["h2"]; n.n_dense = dims["n_dense"]; n.r = dims["r"]
        n.C = dims["C"]; n.n_out_rows = dims["n_out_rows"]; n.ctx_kind = dims["ctx_kind"]
        n.act = dims["act"]; n.out_kind = dims["out_kind"]; n.obj = dims["obj"]; n.k = dims["k"]
        n.max_len = dims["max_len"]; n.nthreads = dims["nthreads"]; n.bmax = dims["bmax"]
        n.in_drop = 0
        if len(params) != N_PARAMS or len(grads) != N_PARAMS or len(accum) != N_PARAMS or len(work) != N_WORK:
            raise ValueError("engine: wrong number of arrays")
        for lst in (params, grads, accum, work):
            for a in lst:
                if a.dtype != want or not a.flags.c_contiguous or not a.flags.writeable:
                    raise ValueError("engine arrays must be writeable, C-contiguous and of one float dtype")
        for i in range(N_PARAMS):
            if params[i].size != grads[i].size or params[i].size != accum[i].size:
                raise ValueError(f"engine: gradient/accumulator size of {PARAM_NAMES[i]} differs")
            n.p[i] = <void*><Py_ssize_t>params[i].ctypes.data
            n.g[i] = <void*><Py_ssize_t>grads[i].ctypes.data
            n.a[i] = <void*><Py_ssize_t>accum[i].ctypes.data
            n.size[i] = params[i].size
        for i in range(N_WORK):
            n.w[i] = <void*><Py_ssize_t>work[i].ctypes.data
        self.mark_emb = np.zeros(n.V_in, np.uint8)
        self.mark_out = np.zeros(n.n_out_rows + n.C + 1, np.uint8)
        self.order = np.zeros(max(n.bmax, 1), np.int32)
        self.cls_count = np.zeros(n.C + 2, np.int32)
        n.mark_emb = <unsigned char*><Py_ssize_t>self.mark_emb.ctypes.data
        n.mark_out = <unsigned char*><Py_ssize_t>self.mark_out.ctypes.data
        n.order = <int*><Py_ssize_t>self.order.ctypes.data
        n.cls_count = <int*><Py_ssize_t>self.cls_count.ctypes.data
        bm = max(n.bmax, 1)
        self._groups = (np.full(n.V_in, -1, np.int32), np.zeros(n.m * bm, np.int32),
                        np.zeros(n.m + 1, np.int32), np.zeros(bm * n.m, np.int32))
        n.uslot = <int*><Py_ssize_t>self._groups[0].ctypes.data
        n.uniq = <int*><Py_ssize_t>self._groups[1].ctypes.data
        n.ustart = <int*><Py_ssize_t>self._groups[2].ctypes.data
        n.uinv = <int*><Py_ssize_t>self._groups[3].ctypes.data
        n.grouped = False
        for key in ("word_class", "class_start", "word_pos", "points", "lengths"):
            if structs[key].dtype != np.int32 or not structs[key].flags.c_contiguous:
                raise ValueError(f"{key} must be C-contiguous int32")
        if structs["codes"].dtype != np.int8 or not structs["codes"].flags.c_contiguous:
            raise ValueError("codes must be C-contiguous int8")
        n.word_class = <int*><Py_ssize_t>structs["word_class"].ctypes.data
        n.class_start = <int*><Py_ssize_t>structs["class_start"].ctypes.data
        n.word_pos = <int*><Py_ssize_t>structs["word_pos"].ctypes.data
        n.points = <int*><Py_ssize_t>structs["points"].ctypes.data
        n.codes = <signed char*><Py_ssize_t>structs["codes"].ctypes.data
        n.lengths = <int*><Py_ssize_t>structs["lengths"].ctypes.data

    @property
    def grouped(self):
        """Whether the last forward pass multiplied each position's distinct words once."""
        return bool(self.net.grouped)

    def set_threads(self, int n):
        if n < 1:
            raise ValueError("threads must be >= 1")
        self.net.nthreads = n

    def _check(self, ctx, tgt):
        B = tgt.shape[0]
        if B > self.net.bmax or B < 1 or ctx.shape[0] != B or ctx.shape[1] != self.net.m:
            raise ValueError(f"batch of {B} rows x {ctx.shape[1]} does not fit the engine "
                             f"({self.net.bmax} rows x {self.net.m})")

    def step(self, const int[:, ::1] ctx, const int[::1] tgt, noise, double dropout, uint64_t seed,
             bint grad, double gscale, double input_dropout=0.0):
        """Sum over the batch of the training loss (-ln p for MLE, the NCE loss for NCE);
        with grad, adds gscale * d(loss)/d(params) into the gradient arrays.

        noise: None for MLE, else (noise1 int32, logkq1 real, noise2 int32, logkq2 real)
        as described at run_step.  Ids must already be validated (contexts 0 <= id < V_in,
        targets 0 <= id < V)."""
        self._check(ctx, tgt)
        if not (0.0 <= input_dropout < 1.0 and 0.0 <= dropout < 1.0):
            raise ValueError("dropout rates must lie in [0, 1)")
        self.net.in_drop = input_dropout
        cdef int B = tgt.shape[0]
        cdef const int[::1] n1, n2
        cdef const int* p1 = NULL
        cdef const int* p2 = NULL
        cdef const float[::1] f1, f2
        cdef const double[::1] d1, d2
        if noise is not None:
            n1 = noise[0]
            n2 = noise[2]
            p1 = &n1[0]
            if n2.shape[0]:
                p2 = &n2[0]
        if self.dbl:
            if noise is not None:
                d1 = noise[1]
                d2 = noise[3]
            with nogil:
                run_step(&self.net, B, &ctx[0, 0], &tgt[0], p1, &d1[0] if p1 != NULL else <double*>NULL,
                         p2, &d2[0] if p2 != NULL else <double*>NULL, dropout, seed, grad, <double>gscale)
        else:
            if noise is not None:
                f1 = noise[1]
                f2 = noise[3]
            with nogil:
                run_step(&self.net, B, &ctx[0, 0], &tgt[0], p1, &f1[0] if p1 != NULL else <float*>NULL,
                         p2, &f2[0] if p2 != NULL else <float*>NULL, dropout, seed, grad, <float>gscale)
        return float(np.sum(self._work[W_LOSS][:B], dtype=np.float64))

    def update(self, double lr, double l2, bint adagrad):
        """Apply and clear the accumulated gradients: dense parameters in full, embedding
        and output rows only where this batch touched them."""
        with nogil:
            if self.dbl:
                run_update(&self.net, lr, l2, adagrad, <double>0)
            else:
                run_update(&self.net, lr, l2, adagrad, <float>0)

    def logprob(self, const int[:, ::1] ctx, const int[::1] tgt, bint normalised=True):
        """ln p(tgt | ctx) per row (exact), or the unnormalised score."""
        self._check(ctx, tgt)
        cdef int B = tgt.shape[0]
        out = np.empty(B, np.float64 if self.dbl else np.float32)
        cdef float[::1] of
        cdef double[::1] od
        if self.dbl:
            od = out
            self.net.in_drop = 0
            with nogil:
                forward(&self.net, B, &ctx[0, 0], 0.0, 0, <double>0)
                eval_logprob(&self.net, B, &tgt[0], &od[0], normalised, <double>0)
        else:
            of = out
            self.net.in_drop = 0
            with nogil:
                forward(&self.net, B, &ctx[0, 0], 0.0, 0, <float>0)
                eval_logprob(&self.net, B, &tgt[0], &of[0], normalised, <float>0)
        return out

    def distribution(self, const int[:, ::1] ctx):
        """(B, V) ln p(w | ctx) for every word, exact."""
        cdef int B = ctx.shape[0]
        if B > self.net.bmax or B < 1 or ctx.shape[1] != self.net.m:
            raise ValueError("batch does not fit the engine")
        out = np.empty((B, self.net.V), np.float64 if self.dbl else np.float32)
        cdef float[:, ::1] of
        cdef double[:, ::1] od
        if self.dbl:
            od = out
            self.net.in_drop = 0
            with nogil:
                forward(&self.net, B, &ctx[0, 0], 0.0, 0, <double>0)
                eval_distribution(&self.net, B, &od[0, 0], <double>0)
        else:
            of = out
            self.net.in_drop = 0
            with nogil:
                forward(&self.net, B, &ctx[0, 0], 0.0, 0, <float>0)
                eval_distribution(&self.net, B, &of[0, 0], <float>0)
        return out
