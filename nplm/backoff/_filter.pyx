# The pass of KenLM's filter program (nplm/cli/kenlm/filter.py) in C without the GIL
# (nplm/src/kenlm_filter.h, kenlm_filter_phrase.h, kenlm_filter_run.h): the input
# mapped (a regular file) or read whole (a pipe), the vocabulary's hash set (or the
# phrase constraint's table of substrings) built from its bytes, the kept lines
# written through buffers to the outputs' file descriptors.  No numpy: the program
# starts without it.
from libc.stdint cimport uint32_t, uint64_t
from libc.stdlib cimport realloc, calloc, free
from libc.string cimport memset
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE


cdef extern from "<sys/mman.h>" nogil:
    void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset)
    int munmap(void *addr, size_t length)
    int madvise(void *addr, size_t length, int advice)
    int PROT_READ
    int MAP_PRIVATE
    int MAP_POPULATE
    int MADV_SEQUENTIAL
    void *MAP_FAILED

cdef extern from "<sys/stat.h>" nogil:
    struct stat:
        long st_size
        unsigned st_mode
    int fstat(int fd, stat *buf)
    bint S_ISREG(unsigned mode)

cdef extern from "<unistd.h>" nogil:
    long lseek(int fd, long offset, int whence)
    ssize_t read(int fd, void *buf, size_t count)
    int SEEK_CUR

cdef extern from "<errno.h>" nogil:
    int errno
    int EINTR

cdef extern from "kenlm_filter_run.h" nogil:
    ctypedef struct nplm_fvocab:
        uint32_t words
        uint32_t sentences
    int nplm_fvocab_build(nplm_fvocab *v, const char *text, size_t size)
    void nplm_fvocab_free(nplm_fvocab *v)
    ctypedef struct nplm_fphrases:
        uint32_t sentences
        uint32_t entries
    int nplm_fphrases_build(nplm_fphrases *p, const char *text, size_t size)
    void nplm_fphrases_free(nplm_fphrases *p)
    ctypedef struct nplm_fout:
        int fd
        int memory
        char *buf
        size_t len
        int err
    ctypedef struct nplm_filter:
        const char *data
        size_t size
        int arpa, mode, context
        int threads
        size_t chunk
        size_t split_min
        int wait_second
        const nplm_fvocab *v
        const nplm_fphrases *ph
        nplm_fout *outs
        uint32_t nout
        const uint32_t **sets
        uint32_t *set_n
        int err
        uint64_t line_no
        const char *err_at
        size_t err_len
        uint32_t err_out
        int order
    int nplm_frun(nplm_filter *f)

MODES = {"copy": 0, "single": 1, "union": 2, "multiple": 3}
PHRASE_MODES = {"union": 4, "multiple": 5}


cdef class Vocabulary:
    """A vocabulary file's words as KenLM's filter reads them: ``sentences`` is the
    number of its lines that hold words (vocab::ReadMultiple)."""
    cdef bytes text
    cdef nplm_fvocab v

    def __cinit__(self, bytes text):
        self.text = text
        cdef const char *p = PyBytes_AS_STRING(text)
        cdef size_t n = PyBytes_GET_SIZE(text)
        cdef int r
        with nogil:
            r = nplm_fvocab_build(&self.v, p, n)
        if r:
            raise MemoryError()

    def __dealloc__(self):
        nplm_fvocab_free(&self.v)

    @property
    def sentences(self):
        return self.v.sentences

    @property
    def words(self):
        return self.v.words


cdef class Phrases:
    """A vocabulary file read as the phrase constraint reads it (phrase::ReadMultiple):
    ``sentences`` is the number of its sentences that hold a phrase."""
    cdef bytes text
    cdef nplm_fphrases p

    def __cinit__(self, bytes text):
        self.text = text
        cdef const char *s = PyBytes_AS_STRING(text)
        cdef size_t n = PyBytes_GET_SIZE(text)
        cdef int r
        with nogil:
            r = nplm_fphrases_build(&self.p, s, n)
        if r:
            raise MemoryError("out of memory for the phrases' table of substrings (every substring of every "
                              "phrase is a key)")

    def __dealloc__(self):
        nplm_fphrases_free(&self.p)

    @property
    def sentences(self):
        return self.p.sentences

    @property
    def substrings(self):
        return self.p.entries


cdef class Input:
    """The bytes of an open file descriptor from its current offset: mapped where it is
    a regular file, else read to its end."""
    cdef char *data
    cdef size_t size
    cdef bint mapped

    def __cinit__(self, int fd):
        cdef stat st
        cdef long at
        cdef size_t cap = 0
        cdef ssize_t r
        cdef char *grown
        cdef bint oom = False
        r = 0
        self.data, self.size, self.mapped = NULL, 0, False
        if fstat(fd, &st) == 0 and S_ISREG(st.st_mode):
            at = lseek(fd, 0, SEEK_CUR)
            if at >= 0 and st.st_size > at:
                # a mapping must start at a page; an input read part way is rare
                if at == 0:
                    # pages read in up front, unless the file may not fit in memory
                    self.data = <char *>mmap(NULL, st.st_size, PROT_READ,
                                             MAP_PRIVATE | (MAP_POPULATE if st.st_size < (1 << 30) else 0), fd, 0)
                    if self.data == <char *>MAP_FAILED:
                        self.data = NULL
                    else:
                        self.size, self.mapped = st.st_size, True
                        madvise(self.data, self.size, MADV_SEQUENTIAL)
                        return
                cap = st.st_size - at + 1
        with nogil:
            while True:
                if self.size == cap:
                    cap = cap * 2 if cap else 1 << 20
                    grown = <char *>realloc(self.data, cap)
                    if grown == NULL:
                        oom = True
                        break
                    self.data = grown
                r = read(fd, self.data + self.size, cap - self.size)
                if r < 0 and errno == EINTR:
                    continue
                if r <= 0:
                    break
                self.size += r
        if oom:
            raise MemoryError()
        if r < 0:
            raise OSError(errno, "read failed")

    def __dealloc__(self):
        if self.mapped:
            munmap(self.data, self.size)
        else:
            free(self.data)

    def __len__(self):
        return self.size


def run(Input data, Vocabulary vocab, str mode, bint context, bint arpa, fds, memory, int threads=1,
        size_t chunk=0, size_t split_min=4 << 20, bint wait_second=False, Phrases phrases=None):
    """Filter ``data`` into the file descriptors ``fds`` (one, or one per sentence in
    multiple mode); ``memory[i]`` holds output i in memory until the end (a stream
    that cannot seek, where the ARPA header is written first).  Returns None, or
    (error code, line number, the line's bytes, output index, errno, order) for the caller
    to word.  ``threads`` 2 or more lets a second thread filter chunks of the input
    (``chunk`` bytes each; 0: a 64th of it) from its end backwards, with one output
    and at least ``split_min`` bytes of input; ``wait_second`` (for tests) has it
    filter them all before the first thread starts.  With ``phrases`` (union and
    multiple) the n-grams are tested against its phrases instead of ``vocab``'s
    words."""
    cdef nplm_filter f
    cdef uint32_t i, n = len(fds)
    cdef int r
    memset(&f, 0, sizeof(f))
    f.mode = MODES[mode] if phrases is None else PHRASE_MODES[mode]
    if phrases is not None and n != (phrases.sentences if mode == "multiple" else 1):
        raise ValueError("the phrase constraint writes one output, or one per sentence")
    f.outs = <nplm_fout *>calloc(max(n, 1), sizeof(nplm_fout))
    if f.outs == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            f.outs[i].fd = fds[i]
            f.outs[i].memory = bool(memory[i])
        f.data, f.size = data.data, data.size
        f.arpa, f.context, f.threads = arpa, context, threads
        f.chunk, f.split_min, f.wait_second = chunk, split_min, wait_second
        f.v = &vocab.v if vocab is not None else NULL
        f.ph = &phrases.p if phrases is not None else NULL
        f.nout = n
        with nogil:
            r = nplm_frun(&f)
        if r == 0:
            return None
        line = f.err_at[:f.err_len] if f.err_at != NULL else b""
        err_no = f.outs[f.err_out].err if f.err_out < n else 0
        return f.err, f.line_no, line, f.err_out, err_no, f.order
    finally:
        for i in range(n):
            free(f.outs[i].buf)
        free(f.outs)
        free(f.sets)
        free(f.set_n)
