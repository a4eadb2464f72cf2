# The value checks of kenlm_check.h (the records' values, quantisation tables) for
# check.py; importable without numpy, like the query program's path.
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

from nplm.backoff.kenlm._klm_tables cimport bytes_at

cdef extern from "kenlm_check.h" nogil:
    int64_t klm_check_values(const uint8_t *base, uint64_t n, uint32_t stride, uint32_t prob_at, int flagged,
                             int backoff_at, int rest_at, const char **what)
    int klm_check_quant(const float *v, uint64_t n, int backoff)


def value_fault(mem, Py_ssize_t offset, uint64_t n, uint32_t stride, uint32_t prob_at, bint flagged,
                int backoff_at=-1, int rest_at=-1):
    """(record, what) of the first unsound value among the n records of ``stride``
    bytes at ``offset`` of mem (the values at the byte offsets given; -1: none), or
    None (klm_check_values)."""
    cdef const uint8_t *base = bytes_at(mem, offset, n * stride)
    cdef const char *what = NULL
    cdef int64_t record
    with nogil:
        record = klm_check_values(base, n, stride, prob_at, flagged, backoff_at, rest_at, &what)
    return None if record < 0 else (record, what.decode())


def quant_fault(mem, Py_ssize_t offset, uint64_t bins, bint backoff):
    """0 when the quantisation table of ``bins`` float32 bins at ``offset`` is sound,
    1 when it holds a value no model holds, 2 when it is out of order."""
    return klm_check_quant(<const float *>bytes_at(mem, offset, 4 * bins), bins, backoff)
