"""Kernels for word clustering: one pass of the exchange algorithm.

The objective is the log-likelihood of the class bigram model
``p(w_i | w_{i-1}) = p(c_i | c_{i-1}) p(w_i | c_i)`` over the token stream, which up
to a constant that does not depend on the clustering is

    L = sum_{c,d} F(N[c,d]) - sum_c F(NL[c]) - sum_c F(NR[c]),   F(x) = x log x

with ``N`` the class bigram counts and ``NL``/``NR`` its row/column sums (Kneser & Ney
1993; Martin, Liermann & Ney 1998).  Moving one word changes only the rows and
columns of its old and new class, and within those only the entries of classes that
the word's neighbours belong to, so each candidate class costs
O(#classes touched by the word's successors and predecessors).

Inputs are validated in ``nplm/clusters.py``; nothing here can fail.
"""
from libc.math cimport log

ctypedef long long i64


cdef inline double _f(const double* table, i64 size, i64 x) noexcept nogil:
    """F(x) = x log x, from the table when x is small enough (almost always)."""
    if x < size:
        return table[x]
    return <double>x * log(<double>x)


def xlogx_table(i64 size):
    """F(x) = x log x for x = 0..size-1 (F(0) = 0)."""
    import numpy as np
    t = np.zeros(max(size, 1), dtype=np.float64)
    cdef double[::1] tv = t
    cdef i64 x
    with nogil:
        for x in range(1, tv.shape[0]):
            tv[x] = <double>x * log(<double>x)
    return t


cdef void _shift_class(i64[:, ::1] N, i64[:, ::1] NT, i64[::1] NL, i64[::1] NR,
                       const i64[::1] a, const i64[::1] b, const int[::1] ts, int ns,
                       const int[::1] tp, int np_, i64 self_count, i64 nl, i64 nr,
                       int c, i64 sign) noexcept nogil:
    """Add (sign=+1) or remove (sign=-1) a word's bigrams to/from class c.

    a[d]/b[d]: the word's bigram counts to/from class d (self-bigrams excluded);
    ts/tp: the classes d with a[d] > 0 / b[d] > 0."""
    cdef int i, d
    for i in range(ns):
        d = ts[i]
        N[c, d] += sign * a[d]
        NT[d, c] += sign * a[d]
    for i in range(np_):
        d = tp[i]
        N[d, c] += sign * b[d]
        NT[c, d] += sign * b[d]
    N[c, c] += sign * self_count
    NT[c, c] += sign * self_count
    NL[c] += sign * nl
    NR[c] += sign * nr


cdef void _gains(const i64* N, const i64* NT, const i64* NL, const i64* NR, i64 C,
                 const i64* a, const i64* b, const int* ts, int ns, const int* tp, int np_,
                 i64 s, i64 nl, i64 nr, const double* F, i64 nF,
                 double* gain) noexcept nogil:
    """gain[k]: change of L when the word (already removed from its class) joins class k."""
    cdef int i, d, k
    cdef i64 ad, bd, x, akk, bkk
    cdef const i64* row
    for k in range(C):
        gain[k] = (_f(F, nF, NL[k]) - _f(F, nF, NL[k] + nl)
                   + _f(F, nF, NR[k]) - _f(F, nF, NR[k] + nr))
    # Row k gains a[d] in column d: read column d of N contiguously from NT.
    for i in range(ns):
        d = ts[i]
        ad = a[d]
        row = NT + d * C
        for k in range(C):
            x = row[k]
            gain[k] += _f(F, nF, x + ad) - _f(F, nF, x)
    # Column k gains b[d] in row d.
    for i in range(np_):
        d = tp[i]
        bd = b[d]
        row = N + d * C
        for k in range(C):
            x = row[k]
            gain[k] += _f(F, nF, x + bd) - _f(F, nF, x)
    # The diagonal entry N[k, k] was counted twice above (once per loop) and misses
    # the self-bigrams: replace the two terms with the true one.
    for k in range(C):
        akk = a[k]
        bkk = b[k]
        if akk or bkk or s:
            x = N[k * C + k]
            gain[k] += (_f(F, nF, x + akk + bkk + s) - _f(F, nF, x + akk)
                        - _f(F, nF, x + bkk) + _f(F, nF, x))


def exchange_pass(const i64[::1] succ_ptr, const int[::1] succ_word, const i64[::1] succ_count,  # IN
                  const i64[::1] pred_ptr, const int[::1] pred_word, const i64[::1] pred_count,  # IN
                  const i64[::1] self_count, const i64[::1] word_nl, const i64[::1] word_nr,     # IN
                  const int[::1] order, const double[::1] F,                                     # IN
                  int[::1] word_class, i64[::1] class_size,                                      # IN/OUT
                  i64[:, ::1] N, i64[:, ::1] NT, i64[::1] NL, i64[::1] NR,                       # IN/OUT
                  double tol):
    """One exchange pass over the words in ``order``; returns the number of moves.

    succ_*: CSR of each word's distinct successors and bigram counts, pred_*: of its
    predecessors, both without self-bigrams (``self_count``).  word_nl/word_nr: how
    often each word is the left/right element of a bigram.  F: x log x table.
    N (C, C) and its transpose NT, NL, NR, class_size and word_class are updated in
    place.  A word moves only when the gain beats staying by more than ``tol`` and
    never leaves its class empty, so L increases strictly with every move.

    Single-threaded on purpose: splitting each word's candidate classes over two
    OpenMP threads (one fork/join per word) measured 3-5x slower on the 2-vCPU
    development VM, and a whole pass over PTB takes ~0.1 s at 200 classes.
    """
    import numpy as np
    cdef int C = N.shape[0]
    a_arr = np.zeros(C, dtype=np.int64)
    b_arr = np.zeros(C, dtype=np.int64)
    ts_arr = np.zeros(C, dtype=np.int32)
    tp_arr = np.zeros(C, dtype=np.int32)
    gain_arr = np.zeros(C, dtype=np.float64)
    cdef i64[::1] a = a_arr
    cdef i64[::1] b = b_arr
    cdef int[::1] ts = ts_arr
    cdef int[::1] tp = tp_arr
    cdef double[::1] gain = gain_arr
    cdef int n_words = order.shape[0]
    cdef int oi, w, c, d, k, best, ns, np_
    cdef i64 j, s, nl, nr, moves = 0
    cdef double best_gain
    cdef i64 nF = F.shape[0]
    with nogil:
        for oi in range(n_words):
            w = order[oi]
            c = word_class[w]
            nl = word_nl[w]
            nr = word_nr[w]
            if class_size[c] == 1 or (nl == 0 and nr == 0):
                continue
            s = self_count[w]
            ns = 0
            for j in range(succ_ptr[w], succ_ptr[w + 1]):
                d = word_class[succ_word[j]]
                if a[d] == 0:
                    ts[ns] = d
                    ns += 1
                a[d] += succ_count[j]
            np_ = 0
            for j in range(pred_ptr[w], pred_ptr[w + 1]):
                d = word_class[pred_word[j]]
                if b[d] == 0:
                    tp[np_] = d
                    np_ += 1
                b[d] += pred_count[j]
            _shift_class(N, NT, NL, NR, a, b, ts, ns, tp, np_, s, nl, nr, c, -1)
            _gains(&N[0, 0], &NT[0, 0], &NL[0], &NR[0], C, &a[0], &b[0], &ts[0], ns,
                   &tp[0], np_, s, nl, nr, &F[0], nF, &gain[0])
            best = c
            best_gain = gain[c] + tol
            for k in range(C):
                if gain[k] > best_gain:
                    best = k
                    best_gain = gain[k]
            _shift_class(N, NT, NL, NR, a, b, ts, ns, tp, np_, s, nl, nr, best, 1)
            if best != c:
                word_class[w] = best
                class_size[c] -= 1
                class_size[best] += 1
                moves += 1
            for k in range(ns):
                a[ts[k]] = 0
            for k in range(np_):
                b[tp[k]] = 0
    return moves
