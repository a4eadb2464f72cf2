# scipy's BLAS for the neural kernels, bound on first use (see _blas.pxd).
import importlib
import sys

from cpython.pycapsule cimport PyCapsule_GetName, PyCapsule_GetPointer
from libc.stdlib cimport abort

import numpy as np

from nplm.io import resources

ctypedef void (*sgemm_t)(char *, char *, int *, int *, int *, float *, float *, int *, float *, int *, float *,
                         float *, int *) noexcept nogil
ctypedef void (*dgemm_t)(char *, char *, int *, int *, int *, double *, double *, int *, double *, int *,
                         double *, double *, int *) noexcept nogil
ctypedef float (*sdot_t)(int *, float *, int *, float *, int *) noexcept nogil
ctypedef double (*ddot_t)(int *, double *, int *, double *, int *) noexcept nogil

cdef sgemm_t _sgemm = NULL
cdef dgemm_t _dgemm = NULL
cdef sdot_t _sdot = NULL
cdef ddot_t _ddot = NULL


cdef void *_function(capi, name) except NULL:
    capsule = capi[name]
    return PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule))


def bind():
    """Bind scipy's BLAS, importing scipy.linalg on the first call (after
    nplm.io.resources.prepare_blas, which may make OpenBLAS single-threaded or refuse
    with OSError(ENOMEM) under a tight address-space limit)."""
    global _sgemm, _dgemm, _sdot, _ddot
    if _ddot != NULL:
        return
    resources.prepare_blas()
    capi = importlib.import_module("scipy.linalg.cython_blas").__pyx_capi__
    _sgemm = <sgemm_t>_function(capi, "sgemm")
    _dgemm = <dgemm_t>_function(capi, "dgemm")
    _sdot = <sdot_t>_function(capi, "sdot")
    _ddot = <ddot_t>_function(capi, "ddot")


def reserve_buffer():
    """One small product (256 x 256), so that OpenBLAS holds a work buffer from then on."""
    bind()
    cdef float[:, ::1] a = np.ones((256, 256), np.float32)
    cdef float[:, ::1] c = np.empty((256, 256), np.float32)
    cdef float one = 1.0, zero = 0.0
    cdef int n = 256
    cdef char t = b'N'
    with nogil:
        _sgemm(&t, &t, &n, &n, &n, &one, &a[0, 0], &n, &a[0, 0], &n, &zero, &c[0, 0], &n)


cdef void _unbound() noexcept nogil:
    # A kernel reached a product without bind(): bind now, or stop with the reason
    # (returning would call a null pointer).
    with gil:
        try:
            bind()
        except BaseException as e:
            sys.stderr.write(f"nplm: the neural kernels cannot load scipy's BLAS: {e}\n")
            sys.stderr.flush()
            abort()


cdef void sgemm(char *transa, char *transb, int *m, int *n, int *k, float *alpha, float *a, int *lda,
                float *b, int *ldb, float *beta, float *c, int *ldc) noexcept nogil:
    if _sgemm == NULL:
        _unbound()
    _sgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)


cdef void dgemm(char *transa, char *transb, int *m, int *n, int *k, double *alpha, double *a, int *lda,
                double *b, int *ldb, double *beta, double *c, int *ldc) noexcept nogil:
    if _dgemm == NULL:
        _unbound()
    _dgemm(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)


cdef float sdot(int *n, float *sx, int *incx, float *sy, int *incy) noexcept nogil:
    if _sdot == NULL:
        _unbound()
    return _sdot(n, sx, incx, sy, incy)


cdef double ddot(int *n, double *dx, int *incx, double *dy, int *incy) noexcept nogil:
    if _ddot == NULL:
        _unbound()
    return _ddot(n, dx, incx, dy, incy)
