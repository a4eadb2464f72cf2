# scipy's BLAS (scipy.linalg.cython_blas) for the neural kernels, bound on first use.
# Cimporting cython_blas itself would import scipy.linalg with every kernel module
# that uses it, and through them with nplm and every command: a fifth of a second on
# an idle machine, a second and more on a busy one, for work that never multiplies a
# matrix (KenLM and ARPA models, build-binary).  These forward to the pointers
# bind() takes from cython_blas; Engine and NeuralCore bind before their first
# product.  Same signatures as cython_blas's.
cdef void sgemm(char *transa, char *transb, int *m, int *n, int *k, float *alpha, float *a, int *lda,
                float *b, int *ldb, float *beta, float *c, int *ldc) noexcept nogil
cdef void dgemm(char *transa, char *transb, int *m, int *n, int *k, double *alpha, double *a, int *lda,
                double *b, int *ldb, double *beta, double *c, int *ldc) noexcept nogil
cdef float sdot(int *n, float *sx, int *incx, float *sy, int *incy) noexcept nogil
cdef double ddot(int *n, double *dx, int *incx, double *dy, int *incy) noexcept nogil
