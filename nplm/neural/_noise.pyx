# Noise samplers of NCE training: Walker/Vose alias tables and draws from them with
# the splitmix64 generator of _train.pxd.
from libc.stdint cimport uint64_t

import numpy as np

from nplm.neural._train cimport uniform01


def build_alias(const double[::1] weights):
    """Walker/Vose alias table for sampling index i with probability weights[i] / sum.
    Returns (prob float64, alias int32)."""
    cdef Py_ssize_t n = weights.shape[0], i, s, l, ns = 0, nl = 0
    if n == 0:
        raise ValueError("alias table over an empty distribution")
    total = float(np.sum(weights))
    if not total > 0:
        raise ValueError("alias table needs a positive total weight")
    prob = np.empty(n, np.float64)
    alias = np.zeros(n, np.int32)
    cdef double[::1] p = prob
    cdef int[::1] a = alias
    cdef Py_ssize_t[::1] small = np.empty(n, np.intp), large = np.empty(n, np.intp)
    for i in range(n):
        p[i] = weights[i] * n / total
        if p[i] < 1.0:
            small[ns] = i; ns += 1
        else:
            large[nl] = i; nl += 1
    while ns and nl:
        ns -= 1; s = small[ns]
        l = large[nl - 1]
        a[s] = <int>l
        p[l] = p[l] + p[s] - 1.0
        if p[l] < 1.0:
            nl -= 1
            small[ns] = l; ns += 1
    # leftovers are 1 up to rounding
    for i in range(nl):
        p[large[i]] = 1.0
    for i in range(ns):
        p[small[i]] = 1.0
    return prob, alias


def sample_alias(const double[::1] prob, const int[::1] alias, int offset, int[::1] out, uint64_t[::1] state):
    """out[i] := offset + an index drawn from the alias table; state[0] is the RNG state
    (splitmix64), advanced in place."""
    cdef Py_ssize_t i, n = prob.shape[0], j
    cdef uint64_t st = state[0]
    cdef double u
    with nogil:
        for i in range(out.shape[0]):
            u = uniform01(&st) * n
            j = <Py_ssize_t>u
            if j >= n:
                j = n - 1
            if u - j < prob[j]:
                out[i] = <int>(offset + j)
            else:
                out[i] = <int>(offset + alias[j])
    state[0] = st


def sample_classes(const double[::1] prob, const int[::1] alias, const int[::1] class_start, int k,
                   int[::1] out, uint64_t[::1] state):
    """For every class c, out[c*k:(c+1)*k] := k rows drawn within c from per-class alias
    tables laid out in class order (alias indices relative to the class start)."""
    cdef Py_ssize_t C = class_start.shape[0] - 1, c, i, j, n, lo
    cdef uint64_t st = state[0]
    cdef double u
    if out.shape[0] != C * k:
        raise ValueError("output size must be n_classes * k")
    with nogil:
        for c in range(C):
            lo = class_start[c]
            n = class_start[c + 1] - lo
            for i in range(k):
                u = uniform01(&st) * n
                j = <Py_ssize_t>u
                if j >= n:
                    j = n - 1
                if u - j < prob[lo + j]:
                    out[c * k + i] = <int>(lo + j)
                else:
                    out[c * k + i] = <int>(lo + alias[lo + j])
    state[0] = st
