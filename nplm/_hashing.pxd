# The hash functions of nplm/src/hash.h, for the kernels that keep their own tables
# (_kn.pyx's counts, _arpa.pyx's vocabulary, _interp.pyx's state cache).
from libc.stdint cimport uint64_t


cdef extern from "hash.h" nogil:
    uint64_t fmix64 "nplm_fmix64"(uint64_t h) noexcept
