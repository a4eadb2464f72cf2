# Where words end, for every kernel that splits text: a declaration only (no module
# behind it), so that kernels which must not import nplm._kernels (the query
# program's loop) share it too.

cdef inline bint is_word_delimiter(unsigned char c) noexcept nogil:
    # KenLM's util::kSpaces and bytes.split()'s delimiters: \t \n \v \f \r and space.
    return c == 32 or (c >= 9 and c <= 13)
