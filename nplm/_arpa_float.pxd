# float32 <-> decimal text of nplm/src/arpa_float.h: the ARPA reader's parser and the
# shortest round-tripping formatter that the ARPA writer, the query program and the
# n-best rescorer print scores with.  A declaration only (no module behind it), so
# that the query program's loop prints scores without importing the ARPA kernels.


cdef extern from "arpa_float.h" nogil:
    enum:
        ERR_FLOAT "NPLM_ERR_FLOAT"          # malformed number
        ERR_NONFINITE "NPLM_ERR_NONFINITE"  # a number that overflows float32
    int parse_float "nplm_parse_float"(const unsigned char* p, const unsigned char** endp,
                                       float* out) noexcept
    int format_float "nplm_format_float"(float v, char* out) noexcept
