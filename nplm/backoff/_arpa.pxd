# The ARPA writer's float formatter, shared with other kernels that print scores
# (the n-best rescorer): the shortest decimal that reads back as the same float32.
cdef int format_float(float v, char* out) noexcept nogil
