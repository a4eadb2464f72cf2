# Interpolation kernels: a scorer that mixes other scorers (linear or log-linear,
# the latter optionally normalised over the union vocabulary), an adapter that
# drives a real kenlm.Model through the same protocol, and the tuning objective
# of normalised log-linear weights.
#
# The mixture's state is the last few words as *union* vocabulary ids (most recent
# first), as many as the component that needs the longest context keeps.  Each
# component's own state is rebuilt from those words with its context_state (exact
# for back-off models: KenLM's GetState), so states of different models never have
# to be stored side by side and equal mixture states still mean equal futures.
cimport openmp
from cpython.ref cimport PyObject
from libc.math cimport exp, log, log10, pow, INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset
from nplm._hashing cimport fmix64
from cython.parallel cimport prange

import sys

import numpy as np
cimport numpy as cnp

from nplm._kernels cimport LMCore, MAX_ORDER, NState, Ret, WordId

cnp.import_array()

cdef enum:
    MAX_COMPONENTS = 16
    MAX_BINS = 8                   # back-off weight bins per context length
    MAX_BUCKETS = (MAX_ORDER - 1) * MAX_BINS + 2   # see _bucket
    ZWAYS = 4                  # Z cache: 4-way set associative, LRU within a set

cdef enum Mode:
    MODE_LINEAR = 0
    MODE_LOGLINEAR = 1         # unnormalised: sum of weighted log10 probabilities
    MODE_NORMALISED = 2        # log-linear minus log10 Z(h)

LINEAR = MODE_LINEAR
BINS_MAX = MAX_BINS
LOGLINEAR = MODE_LOGLINEAR
NORMALISED = MODE_NORMALISED

cdef double LN10 = 2.302585092994046


cdef struct ZEntry:
    uint64_t key
    uint64_t stamp
    double log10z
    WordId words[MAX_ORDER - 1]
    uint8_t length
    uint8_t used


cdef inline uint64_t _state_key(const NState *s) noexcept nogil:
    cdef uint64_t h = 0x9e3779b97f4a7c15ULL + s.length
    cdef int i
    for i in range(min(s.length, MAX_ORDER - 1)):
        h = fmix64(h ^ (<uint64_t>s.words[i] + 0x632be59bd9b4e019ULL * (i + 1)))
    return h


cdef class InterpolatedCore(LMCore):
    """Mixture of LMCores over a union vocabulary.

    maps[i, u] is component i's id of union word u (0 = its <unk>).  A word a
    component does not know is scored with its <unk> probability, plus
    unk_penalty[i] (log10; 0, or -log10 of the number of union words it does not
    know, which spreads its <unk> mass evenly and keeps the component normalised
    over the union vocabulary)."""
    cdef list _keep                                 # the component objects (owners)
    cdef PyObject *comp[MAX_COMPONENTS]             # borrowed, for nogil calls
    cdef public int n
    cdef int ctx[MAX_COMPONENTS]                    # component order - 1
    cdef const int32_t[:, ::1] _maps
    cdef const int32_t *map[MAX_COMPONENTS]
    cdef float unk_pen[MAX_COMPONENTS]
    cdef double weight[MAX_BUCKETS][MAX_COMPONENTS]  # weight[b][i]: row 0 unless bucketed
    cdef public int bucket_by                       # component whose context picks the
    cdef public int n_buckets                       # row (see _bucket), or -1
    cdef public int bins                            # back-off bins per context length
    cdef double edges[MAX_ORDER - 1][MAX_BINS - 1]  # ascending log10 back-off thresholds
    cdef int active[MAX_COMPONENTS]                 # components with a non-zero weight
    cdef int n_active
    cdef public int mode
    cdef public Py_ssize_t size                     # union vocabulary size
    cdef public bint needs_gil                      # some component takes the GIL
    # Optional whole-distribution functions (e.g. a neural softmax in one matrix
    # product), used for Z(h) and tuning instead of one score_word per word.
    cdef list _providers
    cdef bint has_provider[MAX_COMPONENTS]
    cdef Py_ssize_t csize[MAX_COMPONENTS]           # component vocabulary sizes
    # Z(h) cache (normalised log-linear only)
    cdef object _zbuf
    cdef ZEntry *zc
    cdef uint64_t zsets
    cdef uint64_t clock
    cdef openmp.omp_lock_t lock
    cdef public uint64_t z_hits, z_misses

    def __cinit__(self):
        openmp.omp_init_lock(&self.lock)

    def __dealloc__(self):
        openmp.omp_destroy_lock(&self.lock)

    def __init__(self, list cores, maps, weights, int mode, unk_penalty, WordId bos_id,
                 WordId eos_id, Py_ssize_t cache_entries=65536, bint needs_gil=False,
                 providers=None, sizes=None):
        """providers[i], if not None, is f(words (N, MAX_ORDER-1) uint32 component ids
        most recent first, lengths (N,) int32) -> (N, sizes[i]) float32 log10
        distributions equal to component i's score_word in those contexts."""
        cdef int i
        cdef LMCore c
        self.n = len(cores)
        if self.n < 1 or self.n > MAX_COMPONENTS:
            raise ValueError(f"between 1 and {MAX_COMPONENTS} components are supported, got {self.n}")
        self._maps = maps
        if self._maps.shape[0] != self.n or self._maps.shape[1] < 1:
            raise ValueError("maps must have one row per component")
        self.size = self._maps.shape[1]
        if bos_id >= self.size or eos_id >= self.size:
            raise ValueError("<s>/</s> outside the union vocabulary")
        self._keep = list(cores)
        self.order = 1
        for i in range(self.n):
            c = cores[i]
            self.comp[i] = <PyObject *>c
            self.ctx[i] = c.order - 1
            self.order = max(self.order, c.order)
            self.map[i] = &self._maps[i, 0]
            self.unk_pen[i] = unk_penalty[i]
        self._providers = list(providers) if providers is not None else [None] * self.n
        if len(self._providers) != self.n:
            raise ValueError("one provider (or None) per component")
        for i in range(self.n):
            self.has_provider[i] = self._providers[i] is not None
            self.csize[i] = sizes[i] if sizes is not None else 0
            if self.has_provider[i] and self.csize[i] <= int(np.max(maps[i])):
                raise ValueError("a provider needs its component's vocabulary size")
        if self.order > MAX_ORDER:
            raise ValueError(f"order {self.order} above {MAX_ORDER}")
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.mode = mode
        self.needs_gil = needs_gil
        sets = 1
        while sets * ZWAYS < cache_entries:
            sets *= 2
        self._zbuf = np.zeros(sets * ZWAYS * sizeof(ZEntry), dtype=np.uint8)
        self.zc = <ZEntry *>cnp.PyArray_DATA(self._zbuf)
        self.zsets = sets
        self.bucket_by = -1
        self.n_buckets = 1
        self.bins = 1
        self.set_weights(weights)

    def set_weights(self, weights, int bucket_by=-1, edges=None):
        """Replace the weights: one per component, or (linear mode) a row of them per
        context bucket of component ``bucket_by`` (see _bucket): with ``edges``, an
        (order - 1, bins - 1) array of ascending log10 back-off thresholds per
        context length of that component (default: one bin), (order - 1) * bins + 2
        rows.  Clears the Z cache."""
        cdef int i, b, rows, L, k, bins = 1
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim == 1:
            w = w[None, :]
        if w.ndim != 2 or w.shape[1] != self.n:
            raise ValueError(f"weights of shape {np.shape(weights)} for {self.n} components")
        if bucket_by >= self.n or bucket_by < -1:
            raise ValueError(f"bucket_by {bucket_by}: no such component")
        if bucket_by >= 0 and self.mode != MODE_LINEAR:
            raise ValueError("weights per context bucket need a linear mixture")
        if edges is not None:
            e = np.asarray(edges, dtype=np.float64)
            if bucket_by < 0 or e.ndim != 2 or e.shape[0] != self.ctx[bucket_by] \
                    or e.shape[1] + 1 > MAX_BINS:
                raise ValueError(f"edges of shape {e.shape}: expected ({self.ctx[bucket_by] if bucket_by >= 0 else 0}, "
                                 f"bins - 1) with at most {MAX_BINS} bins")
            if not np.all(np.isfinite(e)) or np.any(np.diff(e, axis=1) < 0):
                raise ValueError("edges must be finite and ascending along each row")
            bins = e.shape[1] + 1
        rows = self.ctx[bucket_by] * bins + 2 if bucket_by >= 0 else 1
        if w.shape[0] != rows:
            raise ValueError(f"{w.shape[0]} rows of weights, expected {rows}")
        if not np.any(w != 0.0):
            raise ValueError("at least one weight must be non-zero")
        # checked: now replace (a failed call leaves the old weights in place)
        for L in range(self.ctx[bucket_by] if edges is not None else 0):
            for k in range(bins - 1):
                self.edges[L][k] = e[L, k]
        self.n_active = 0
        for i in range(self.n):
            for b in range(rows):
                self.weight[b][i] = float(w[b, i])
            if np.any(w[:, i] != 0.0):
                self.active[self.n_active] = i
                self.n_active += 1
        self.bucket_by = bucket_by
        self.n_buckets = rows
        self.bins = bins
        self.clear_cache()

    def clear_cache(self):
        memset(self.zc, 0, self.zsets * ZWAYS * sizeof(ZEntry))
        self.clock = 0
        self.z_hits = 0
        self.z_misses = 0

    @property
    def components(self):
        return list(self._keep)

    # --- component access --------------------------------------------------------

    cdef inline int _comp_state(self, int i, const NState *ins, NState *out) except -1 nogil:
        """Component i's state for the mixture context ``ins``."""
        cdef WordId buf[MAX_ORDER]
        cdef WordId u
        cdef int j, m = ins.length
        if m > self.ctx[i]:
            m = self.ctx[i]
        for j in range(m):
            u = ins.words[j]
            buf[j] = <WordId>self.map[i][u if u < self.size else 0]    # a foreign State
        return (<LMCore>self.comp[i]).context_state(buf, m, out)

    cdef inline int _comp_score(self, int i, const NState *cs, WordId u, NState *out,
                                Ret *ret) except -1 nogil:
        """Component i's log10 p(union word u | cs) (unknown-word penalty included)."""
        cdef WordId w = <WordId>self.map[i][u]
        (<LMCore>self.comp[i]).score_word(cs, w, out, ret)
        if w == 0:
            ret.prob += self.unk_pen[i]
        return 0

    cdef inline int _bucket(self, const NState *ins) except -1 nogil:
        """The weight row of context ``ins``.  Component bucket_by's state for it has
        length L (how much of the context that model can use: KenLM's state for a
        back-off model) and, for L > 0, the log10 back-off weight b of its longest
        context n-gram (the mass that model leaves to shorter contexts there).  Row 0
        is L = 0; rows 1 + (L-1) * bins + j, j the number of edges[L-1] <= b, the
        others; the last row is the sentence start alone."""
        cdef int L, j = 0
        cdef double b
        if self.bucket_by < 0:
            return 0
        L = self._bucket_state(ins, &b)
        if L < 0:
            return self.n_buckets - 1
        if L == 0:
            return 0
        while j < self.bins - 1 and self.edges[L - 1][j] <= b:
            j += 1
        return 1 + (L - 1) * self.bins + j

    cdef inline int _bucket_state(self, const NState *ins, double *b) except -2 nogil:
        """What _bucket reads of context ``ins``: -1 for the sentence start alone, else
        the length L of component bucket_by's state, with *b the log10 back-off weight
        of its longest context n-gram (0 when L = 0)."""
        cdef NState cs
        cdef int L
        b[0] = 0.0
        if ins.length == 1 and ins.words[0] == self.bos_id:
            return -1
        self._comp_state(self.bucket_by, ins, &cs)
        L = min(<int>cs.length, self.ctx[self.bucket_by])
        if L > 0:
            b[0] = cs.backoff[L - 1]
        return L

    cdef inline void _unpack(self, const uint32_t[:, ::1] contexts, Py_ssize_t c,
                             NState *st) noexcept nogil:
        """Row c of mixture contexts (as from trace()) as a state."""
        cdef int j
        st.length = <uint8_t>contexts[c, 0]
        for j in range(st.length):
            st.words[j] = contexts[c, j + 1]

    def state_features(self, const uint32_t[:, ::1] contexts):  # IN
        """Component bucket_by's (length, log10 back-off of the longest context
        n-gram) for mixture contexts (as from trace()), and whether each is the
        sentence start alone: the inputs of _bucket, for choosing edges."""
        cdef Py_ssize_t C = contexts.shape[0], c
        len_a = np.zeros(C, dtype=np.int32)
        bo_a = np.zeros(C, dtype=np.float64)
        start_a = np.zeros(C, dtype=bool)
        cdef int32_t[::1] lv = len_a
        cdef double[::1] bv = bo_a
        cdef NState st
        cdef int L
        if self.bucket_by < 0 or contexts.shape[1] != MAX_ORDER:
            raise ValueError("no bucket component, or malformed contexts")
        for c in range(C):
            self._unpack(contexts, c, &st)
            L = self._bucket_state(&st, &bv[c])
            start_a[c] = L < 0
            lv[c] = max(L, 0)
        return len_a, bo_a, start_a

    def context_rows(self, const uint32_t[:, ::1] contexts):  # IN
        """The weight row of each mixture context (as from trace()): int32 (C,)."""
        cdef Py_ssize_t C = contexts.shape[0], c
        rows_a = np.zeros(C, dtype=np.int32)
        cdef int32_t[::1] rv = rows_a
        cdef NState st
        if contexts.shape[1] != MAX_ORDER:
            raise ValueError("malformed contexts")
        for c in range(C):
            self._unpack(contexts, c, &st)
            rv[c] = self._bucket(&st)
        return rows_a

    cdef inline double _combine(self, const double *lp, int b) noexcept nogil:
        """Mix the active components' log10 probabilities (lp[a] for active[a]) with
        weight row b."""
        cdef int a
        cdef double s = 0.0
        cdef const double *w = self.weight[b]
        if self.mode == MODE_LINEAR:
            if self.n_active == 1 and w[self.active[0]] == 1.0:
                return lp[0]
            for a in range(self.n_active):
                s += w[self.active[a]] * pow(10.0, lp[a])
            return log10(s) if s > 0.0 else -INFINITY
        for a in range(self.n_active):
            s += w[self.active[a]] * lp[a]
        return s

    # --- the protocol ------------------------------------------------------------

    cdef void begin_state(self, NState *out) noexcept nogil:
        out.length = 1
        out.words[0] = self.bos_id
        out.backoff[0] = 0.0

    cdef int context_state(self, const WordId *words, int n, NState *out) except -1 nogil:
        # Keep what the longest-context component keeps of these words.
        cdef NState tmp, cs
        cdef int i, a, keep = 0
        if n > self.order - 1:
            n = self.order - 1
        for i in range(n):
            tmp.words[i] = words[i] if words[i] < self.size else 0
            tmp.backoff[i] = 0.0
        tmp.length = <uint8_t>n
        for a in range(self.n_active):
            i = self.active[a]
            self._comp_state(i, &tmp, &cs)
            if cs.length > keep:
                keep = cs.length
        for i in range(keep):
            out.words[i] = tmp.words[i]
            out.backoff[i] = 0.0
        out.length = <uint8_t>keep
        return 0

    cdef int score_word(self, const NState *in_state, WordId u, NState *out, Ret *ret) except -1 nogil:
        cdef NState cs[MAX_COMPONENTS]
        cdef NState co
        cdef Ret r
        cdef double lp[MAX_COMPONENTS]
        cdef double prob
        cdef int a, i, j, length = 0, ngl = 1
        # A copy: out may alias in_state, and a foreign State may claim more words
        # than any mixture keeps.
        cdef NState st = in_state[0]
        cdef const NState *ins = &st
        if st.length > self.order - 1:
            st.length = <uint8_t>(self.order - 1)
        for j in range(st.length):
            if st.words[j] >= self.size:
                st.words[j] = 0
        if u >= self.size:
            u = 0
        for a in range(self.n_active):
            i = self.active[a]
            self._comp_state(i, ins, &cs[a])
            self._comp_score(i, &cs[a], u, &co, &r)
            lp[a] = r.prob
            if co.length > length:
                length = co.length
            if r.ngram_length > ngl:
                ngl = r.ngram_length
        prob = self._combine(lp, self._bucket(ins))
        if self.mode == MODE_NORMALISED:
            prob -= self._log10z(ins, cs)
        if length > ins.length + 1:
            length = ins.length + 1
        if length > MAX_ORDER - 1:
            length = MAX_ORDER - 1
        # Shift from the oldest kept word down, in case out aliases ins.
        for j in range(length - 1, 0, -1):
            out.words[j] = ins.words[j - 1]
            out.backoff[j] = 0.0
        out.words[0] = u
        out.backoff[0] = 0.0
        out.length = <uint8_t>length
        ret.prob = <float>prob
        ret.ngram_length = ngl
        return 0

    # --- normalisation -------------------------------------------------------------

    cdef double _log10z(self, const NState *ins, const NState *cs) except? -1 nogil:
        """log10 of sum over the union vocabulary (without <s>) of the unnormalised
        log-linear probabilities in context ``ins``; cached per context."""
        cdef uint64_t key = _state_key(ins)
        cdef ZEntry *row = &self.zc[(key & (self.zsets - 1)) * ZWAYS]
        cdef ZEntry *victim
        cdef int k
        cdef double z = 0.0, s
        cdef Py_ssize_t u
        cdef NState tmp
        cdef Ret r
        openmp.omp_set_lock(&self.lock)
        for k in range(ZWAYS):
            if (row[k].used and row[k].key == key and row[k].length == ins.length
                    and memcmp(row[k].words, ins.words, ins.length * sizeof(WordId)) == 0):
                self.clock += 1
                row[k].stamp = self.clock
                self.z_hits += 1
                s = row[k].log10z
                openmp.omp_unset_lock(&self.lock)
                return s
        openmp.omp_unset_lock(&self.lock)
        # Not cached: one pass over the vocabulary (outside the lock, so threads
        # working on other contexts proceed).
        cdef float *dist[MAX_COMPONENTS]
        cdef int i
        cdef WordId w
        for k in range(self.n_active):
            dist[k] = NULL
        try:
            for k in range(self.n_active):
                i = self.active[k]
                if self.has_provider[i]:
                    dist[k] = <float *>malloc(self.csize[i] * sizeof(float))
                    if dist[k] == NULL:
                        with gil:
                            raise MemoryError(f"{self.csize[i] * sizeof(float)} bytes")
                    self._provide(i, &cs[k], dist[k])
            for u in range(self.size):
                if u == self.bos_id:
                    continue
                s = 0.0
                for k in range(self.n_active):
                    i = self.active[k]
                    if dist[k] != NULL:
                        w = <WordId>self.map[i][u]
                        s += self.weight[0][i] * (dist[k][w] + (self.unk_pen[i] if w == 0 else 0.0))
                    else:
                        self._comp_score(i, &cs[k], <WordId>u, &tmp, &r)
                        s += self.weight[0][i] * r.prob
                z += pow(10.0, s)
        finally:
            for k in range(self.n_active):
                free(dist[k])
        s = log10(z)
        openmp.omp_set_lock(&self.lock)
        victim = &row[0]
        for k in range(ZWAYS):
            if not row[k].used:
                victim = &row[k]
                break
            if row[k].stamp < victim.stamp:
                victim = &row[k]
        self.clock += 1
        victim.key = key
        victim.stamp = self.clock
        victim.log10z = s
        victim.length = ins.length
        memcpy(victim.words, ins.words, ins.length * sizeof(WordId))
        victim.used = 1
        self.z_misses += 1
        openmp.omp_unset_lock(&self.lock)
        return s

    # --- tuning support ----------------------------------------------------------

    def trace(self, const int32_t[::1] tokens, const int64_t[::1] offsets, bint bos):  # IN
        """Walk sentences of union ids (tokens[offsets[s]:offsets[s+1]], </s>
        included by the caller) keeping every component's context (weights are
        ignored).  Returns (comp_log10 float64 (n, T), contexts uint32 (T, MAX_ORDER)
        with column 0 the context length and then its words, most recent first,
        buckets int32 (T,): each context's weight row)."""
        cdef Py_ssize_t T = tokens.shape[0], S = offsets.shape[0] - 1, s, t
        lp_a = np.empty((self.n, T), dtype=np.float64)
        ctx_a = np.zeros((T, MAX_ORDER), dtype=np.uint32)
        bk_a = np.zeros(T, dtype=np.int32)
        cdef double[:, ::1] lp = lp_a                   # OUT
        cdef uint32_t[:, ::1] ctx = ctx_a               # OUT
        cdef int32_t[::1] bk = bk_a                     # OUT
        cdef NState st, cs, co
        cdef Ret r
        cdef int i, j, length
        cdef WordId u
        if S < 0 or offsets[S] != T:
            raise ValueError("offsets do not cover the tokens")
        with nogil:
            for s in range(S):
                if bos:
                    self.begin_state(&st)
                else:
                    st.length = 0
                for t in range(offsets[s], offsets[s + 1]):
                    u = <WordId>tokens[t]
                    if u >= self.size:
                        u = 0
                    ctx[t, 0] = st.length
                    for j in range(st.length):
                        ctx[t, j + 1] = st.words[j]
                    bk[t] = self._bucket(&st)
                    length = 0
                    for i in range(self.n):
                        self._comp_state(i, &st, &cs)
                        self._comp_score(i, &cs, u, &co, &r)
                        lp[i, t] = r.prob
                        if co.length > length:
                            length = co.length
                    if length > st.length + 1:
                        length = st.length + 1
                    for j in range(length - 1, 0, -1):
                        st.words[j] = st.words[j - 1]
                    st.words[0] = u
                    st.length = <uint8_t>length
        return lp_a, ctx_a, bk_a

    cdef int _provide(self, int i, const NState *cs, float *out) except -1 with gil:
        """Component i's distribution in its state cs, from its provider."""
        words = np.zeros((1, MAX_ORDER - 1), dtype=np.uint32)
        cdef int j
        for j in range(cs.length):
            words[0, j] = cs.words[j]
        d = np.ascontiguousarray(self._providers[i](words, np.array([cs.length], dtype=np.int32)),
                                 dtype=np.float32)
        if d.shape != (1, self.csize[i]):
            raise ValueError(f"distribution provider of component {i} returned shape {d.shape}, "
                             f"expected (1, {self.csize[i]})")
        cdef const float[:, ::1] dv = d
        memcpy(out, &dv[0, 0], self.csize[i] * sizeof(float))
        return 0

    def component_contexts(self, const uint32_t[:, ::1] contexts, int i):  # IN
        """Component i's own states for mixture contexts (as from trace()):
        (words uint32 (N, MAX_ORDER-1) most recent first, lengths int32 (N,))."""
        cdef Py_ssize_t C = contexts.shape[0], c
        words_a = np.zeros((C, MAX_ORDER - 1), dtype=np.uint32)
        len_a = np.zeros(C, dtype=np.int32)
        cdef uint32_t[:, ::1] wv = words_a
        cdef int32_t[::1] lv = len_a
        cdef NState st, cs
        cdef int j
        if i < 0 or i >= self.n or contexts.shape[1] != MAX_ORDER:
            raise ValueError("bad component index or contexts")
        for c in range(C):
            self._unpack(contexts, c, &st)
            self._comp_state(i, &st, &cs)
            lv[c] = cs.length
            for j in range(cs.length):
                wv[c, j] = cs.words[j]
        return words_a, len_a

    def distributions(self, const uint32_t[:, ::1] contexts, float[:, :, ::1] out,  # IN, OUT
                      int threads=1):
        """out[c, i, u] = component i's log10 p(u | context c) over the union
        vocabulary (<s> included; callers skip it).  contexts as from trace()."""
        cdef Py_ssize_t C = contexts.shape[0], c
        cdef int i
        if out.shape[0] != C or out.shape[1] != self.n or out.shape[2] != self.size:
            raise ValueError("out must have shape (contexts, components, vocabulary)")
        if contexts.shape[1] != MAX_ORDER:
            raise ValueError("malformed contexts")
        if threads < 1:
            raise ValueError("threads must be >= 1")
        # Components with a provider: whole batches of contexts at once.
        o = np.asarray(out)
        for i in range(self.n):
            if not self.has_provider[i]:
                continue
            words, lengths = self.component_contexts(contexts, i)
            m = np.asarray(self._maps[i])
            pen = np.where(m == 0, self.unk_pen[i], 0.0).astype(np.float32)
            for lo in range(0, C, 256):
                d = np.asarray(self._providers[i](words[lo:lo + 256], lengths[lo:lo + 256]),
                               dtype=np.float32)
                if d.shape != (min(256, C - lo), self.csize[i]):
                    raise ValueError(f"distribution provider of component {i} returned shape {d.shape}")
                o[lo:lo + 256, i, :] = d[:, m] + pen
        if self.needs_gil or threads == 1:
            with nogil:
                for c in range(C):
                    self._distribution(contexts, c, out)
        else:
            for c in prange(C, nogil=True, schedule="dynamic", num_threads=threads):
                self._distribution(contexts, c, out)

    cdef int _distribution(self, const uint32_t[:, ::1] contexts, Py_ssize_t c,
                           float[:, :, ::1] out) except -1 nogil:
        cdef NState st, cs, tmp
        cdef Ret r
        cdef int i
        cdef Py_ssize_t u
        self._unpack(contexts, c, &st)
        for i in range(self.n):
            if self.has_provider[i]:
                continue            # filled in batches by distributions()
            self._comp_state(i, &st, &cs)
            for u in range(self.size):
                self._comp_score(i, &cs, <WordId>u, &tmp, &r)
                out[c, i, u] = r.prob
        return 0


# ---------------------------------------------------------------------------------
# The normalised log-linear objective for weight tuning.

def loglinear_objective(const float[:, :, ::1] F, const double[::1] counts,  # IN
                        const double[::1] weights, Py_ssize_t skip, int threads=1):  # IN
    """For F[c, i, u] = log10 p_i(u | c), the count-weighted sums over contexts c of
    ln Z_c, of E_c[ln p_i] (n,) and of Cov_c[ln p_i, ln p_j] (n, n), where
    Z_c = sum_u prod_i p_i(u | c) ** weights[i] over u != skip and E_c is the
    expectation under the normalised product distribution.  Returns the three."""
    cdef Py_ssize_t C = F.shape[0], n = F.shape[1], c
    if counts.shape[0] != C or weights.shape[0] != n or n > MAX_COMPONENTS:
        raise ValueError("shape mismatch")
    if threads < 1:
        raise ValueError("threads must be >= 1")
    part = np.zeros((C, 1 + n + n * n), dtype=np.float64)
    cdef double[:, ::1] p = part                          # OUT, one row per context
    for c in prange(C, nogil=True, schedule="static", num_threads=threads):
        _objective_row(F, c, weights, skip, p)
    total = (part * np.asarray(counts)[:, None]).sum(axis=0)
    return float(total[0]), total[1:1 + n], total[1 + n:].reshape(n, n)


cdef int _objective_row(const float[:, :, ::1] F, Py_ssize_t c, const double[::1] weights,
                        Py_ssize_t skip, double[:, ::1] p) except -1 nogil:
    cdef Py_ssize_t n = F.shape[1], V = F.shape[2], u
    cdef int i, j
    cdef double m = -INFINITY, z = 0.0, e, fi
    cdef double acc[MAX_COMPONENTS]
    cdef double acc2[MAX_COMPONENTS * MAX_COMPONENTS]
    # The weighted sums first (one sweep over each component's row), then the
    # exponentials shifted by their maximum so that none overflows, whatever the weights.
    cdef double *s = <double *>malloc(V * sizeof(double))
    if s == NULL:
        with gil:
            raise MemoryError(f"{V * sizeof(double)} bytes")
    for u in range(V):
        s[u] = 0.0
    for i in range(n):
        acc[i] = 0.0
        for j in range(n):
            acc2[i * n + j] = 0.0
        for u in range(V):
            s[u] += weights[i] * F[c, i, u]
    for u in range(V):
        if u != skip and s[u] > m:
            m = s[u]
    for u in range(V):
        if u == skip:
            continue
        e = exp((s[u] - m) * LN10)
        z += e
        for i in range(n):
            fi = e * F[c, i, u]
            acc[i] += fi
            for j in range(i + 1):
                acc2[i * n + j] += fi * F[c, j, u]
    free(s)
    p[c, 0] = log(z) + m * LN10
    for i in range(n):
        p[c, 1 + i] = acc[i] / z * LN10
        for j in range(i + 1):
            p[c, 1 + n + i * n + j] = (acc2[i * n + j] / z - acc[i] / z * acc[j] / z) * LN10 * LN10
            p[c, 1 + n + j * n + i] = p[c, 1 + n + i * n + j]
    return 0


# ---------------------------------------------------------------------------------
# A real kenlm.Model as a component.  kenlm cannot be called without the GIL, so
# this core takes it for every word; mixtures containing one do not run in parallel.

cdef class KenlmCore(LMCore):
    """Drives a kenlm.Model.  Its word ids index ``words`` (0 = <unk>); its state is
    the last words (up to the n-gram length kenlm matched, which bounds kenlm's own
    minimised state), and the kenlm.State of each such context is cached."""
    cdef object model
    cdef object state_cls
    cdef list words
    cdef dict cache
    cdef Py_ssize_t cache_limit

    def __init__(self, model, list words, WordId bos_id, WordId eos_id, Py_ssize_t cache_limit=1 << 20):
        self.model = model
        self.state_cls = sys.modules[type(model).__module__].State
        self.words = words
        self.order = model.order
        if self.order > MAX_ORDER:
            raise ValueError(f"order {self.order} above {MAX_ORDER}")
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.cache = {}
        self.cache_limit = cache_limit

    cdef int context_state(self, const WordId *words, int n, NState *out) except -1 nogil:
        """KenLM's own state after the context ``words`` (most recent first): kenlm
        minimises it to the longest suffix it can still extend, so its length is the
        shortest suffix whose kenlm.State equals the whole context's (States compare
        by length, then words).  Back-off weights are not visible through kenlm: 0."""
        cdef int i
        if n > self.order - 1:
            n = self.order - 1
        with gil:
            n = self._state_length(words, n)
        for i in range(n):
            out.words[i] = words[i]
            out.backoff[i] = 0.0
        out.length = <uint8_t>n
        return 0

    cdef int _state_length(self, const WordId *words, int n) except -1:
        cdef int j
        key = (<char *>words)[:n * sizeof(WordId)]
        whole = self._kstate(key)
        for j in range(n):
            if self._kstate(key[:j * sizeof(WordId)]) == whole:
                return j
        return n

    cdef int score_word(self, const NState *ins, WordId w, NState *out, Ret *ret) except -1 nogil:
        with gil:
            return self._score(ins, w, out, ret)

    cdef object _kstate(self, bytes key):
        """kenlm.State after the context ``key`` (uint32 ids, most recent first),
        by scoring its words from the null context (memoised)."""
        st = self.cache.get(key)
        if st is not None:
            return st
        st = self.state_cls()
        if len(key) == 0:
            self.model.NullContextWrite(st)
        else:
            parent = self._kstate(key[4:])
            self.model.BaseScore(parent, self.words[int.from_bytes(key[:4], "little")], st)
        if len(self.cache) >= self.cache_limit:
            self.cache.clear()
        self.cache[key] = st
        return st

    cdef int _score(self, const NState *ins, WordId w, NState *out, Ret *ret) except -1:
        cdef int j, length
        cdef NState tmp = ins[0]
        if w >= len(self.words):
            w = 0
        key = (<char *>tmp.words)[:tmp.length * sizeof(WordId)]
        st = self._kstate(key)
        nxt = self.state_cls()
        r = self.model.BaseFullScore(st, self.words[w], nxt)
        length = min(r.ngram_length, self.order - 1, tmp.length + 1)
        for j in range(length - 1, 0, -1):
            out.words[j] = tmp.words[j - 1]
            out.backoff[j] = 0.0
        out.words[0] = w
        out.backoff[0] = 0.0
        out.length = <uint8_t>length
        # kenlm's state after this word lies within these words, so the next call
        # finds it here instead of re-scoring them.
        if len(self.cache) < self.cache_limit:
            self.cache[(<char *>out.words)[:length * sizeof(WordId)]] = nxt
        ret.prob = r.log_prob
        ret.ngram_length = r.ngram_length
        return 0
