# Hash helpers shared by the kernels that keep their own tables (_kn.pyx's counts,
# _interp.pyx's state cache); inline, so no module of their own.
from libc.stdint cimport uint64_t


cdef inline uint64_t fmix64(uint64_t h) noexcept nogil:
    """Finaliser of MurmurHash3: spreads every input bit over the word."""
    h ^= h >> 33
    h *= 0xff51afd7ed558ccdULL
    h ^= h >> 33
    h *= 0xc4ceb9fe1a85ec53ULL
    h ^= h >> 33
    return h
