# The back-off query engine: KenLM's probing model (semantics included) over
# memory-mappable arrays, behind the LMCore protocol of nplm/_kernels.pxd, and the
# builder of its tables.
#
# Layout of the back-off tables (all plain arrays, so they map straight from the
# nplm binary file):
#   uni      float32 (V, 2)   [prob, backoff] indexed by word id
#   mid[k]   uint64  (B, 2)   entries {key, (prob, backoff)} for order k + 2
#   longest  uint32  (B, 3)   packed entries {key, prob} for the highest order
# Keys are 64-bit hashes of the n-gram built from the last word backwards, so a
# query extends one hash per context word.  Key 0 marks an empty bucket.  As in
# KenLM, the sign bit of a stored probability says "no longer n-gram ends with
# this one" (so lookups can stop early) and a back-off of -0.0 says "no longer
# n-gram starts with this one" (so the state can forget it).
cimport cython
from libc.math cimport fabsf
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t

import numpy as np

from nplm._kernels cimport Hint, LMCore, NState, Ret, WordId, MAX_ORDER

cdef extern from "backoff_table.h":
    uint64_t nplm_fastrange(uint64_t h, uint64_t n) noexcept nogil
    uint64_t nplm_combine(uint64_t h, uint32_t w) noexcept nogil
    void nplm_prefetch(const void *p) noexcept nogil
    void nplm_prefetch_run(const void *p) noexcept nogil
    int nplm_signbit(float f) noexcept nogil
    float nplm_neg(float f) noexcept nogil
    float nplm_pos(float f) noexcept nogil
    int nplm_has_ext(float f) noexcept nogil
    float nplm_no_ext() noexcept nogil
    ctypedef struct LongEntry "nplm_long_entry":
        uint64_t key
        float prob
    ctypedef struct MidEntry "nplm_mid_entry":
        uint64_t key
        float prob
        float backoff
    ctypedef struct UniEntry "nplm_uni_entry":
        float prob
        float backoff


def ngram_key(words):
    """Table key of an n-gram given as engine word ids, oldest first."""
    cdef Py_ssize_t i
    cdef uint64_t h = <uint32_t>words[len(words) - 1]
    for i in range(len(words) - 2, -1, -1):
        h = nplm_combine(h, <uint32_t>words[i])
    return h


cdef class BackoffCore(LMCore):
    """KenLM's probing back-off model over memory-mappable arrays."""
    cdef object _arrays                 # keeps the (mapped) arrays alive
    cdef const UniEntry *uni
    cdef Py_ssize_t n_uni
    cdef const MidEntry *mid[MAX_ORDER]
    cdef uint64_t mid_buckets[MAX_ORDER]
    cdef const LongEntry *longest
    cdef uint64_t long_buckets

    def __init__(self, int order, uni, mids, longest, WordId bos_id, WordId eos_id):
        """uni: float32 (V, 2); mids: list of uint64 (B, 2) for orders 2..N-1;
        longest: uint32 (B, 3) for order N (ignored when N == 1)."""
        cdef const float[:, ::1] u = uni
        cdef const uint64_t[:, ::1] m
        cdef const uint32_t[:, ::1] l
        cdef int k
        if order < 1 or order > MAX_ORDER:
            raise ValueError(f"order {order} outside 1..{MAX_ORDER}")
        if len(mids) != max(order - 2, 0):
            raise ValueError("wrong number of middle tables")
        self.order = order
        self.bos_id = bos_id
        self.eos_id = eos_id
        self._arrays = (uni, list(mids), longest)
        if u.shape[1] != 2 or u.shape[0] < 1 or bos_id >= u.shape[0] or eos_id >= u.shape[0]:
            raise ValueError("malformed unigram table")
        self.uni = <const UniEntry *>&u[0, 0]
        self.n_uni = u.shape[0]
        for k in range(order - 2):
            m = mids[k]
            if m.shape[0] < 1 or m.shape[1] != 2:
                raise ValueError(f"malformed {k + 2}-gram table")
            self.mid[k] = <const MidEntry *>&m[0, 0]
            self.mid_buckets[k] = m.shape[0]
        if order >= 2:
            l = longest
            if l.shape[0] < 1 or l.shape[1] != 3:
                raise ValueError(f"malformed {order}-gram table")
            self.longest = <const LongEntry *>&l[0, 0]
            self.long_buckets = l.shape[0]

    cdef void begin_state(self, NState *out) noexcept nogil:
        out.length = 1
        out.words[0] = self.bos_id
        out.backoff[0] = self.uni[self.bos_id].backoff

    cdef void prefetch(self, const NState *ins, WordId w, Hint *hint) noexcept nogil:
        self._keys(ins, w, hint)

    cdef int score_word(self, const NState *ins, WordId w, NState *out, Ret *ret) except -1 nogil:
        cdef Hint hint
        self._keys(ins, w, &hint)
        return self._probe(ins, w, &hint, out, ret)

    cdef int score_hinted(self, const NState *ins, WordId w, const Hint *hint, NState *out,
                          Ret *ret) except -1 nogil:
        return self._probe(ins, w, hint, out, ret)

    cdef inline void _keys(self, const NState *ins, WordId w, Hint *hint) noexcept nogil:
        # Every order's key and first bucket are known from the words alone: request
        # all the buckets now, so that their cache misses overlap instead of
        # following one another, and keep keys and buckets for the probes.
        cdef uint64_t node
        cdef int i, n_ctx = ins.length
        if w >= self.n_uni:
            w = 0
        if n_ctx > self.order - 1:
            n_ctx = self.order - 1
        nplm_prefetch(&self.uni[w])
        node = w
        for i in range(n_ctx):
            node = nplm_combine(node, ins.words[i])
            hint.key[i] = node
            if i == self.order - 2:
                hint.bucket[i] = nplm_fastrange(node, self.long_buckets)
                nplm_prefetch_run(&self.longest[hint.bucket[i]])
            else:
                hint.bucket[i] = nplm_fastrange(node, self.mid_buckets[i])
                nplm_prefetch_run(&self.mid[i][hint.bucket[i]])
        hint.n = n_ctx

    cdef inline int _probe(self, const NState *ins, WordId w, const Hint *hint, NState *out,
                           Ret *ret) noexcept nogil:
        # (One function: the probes of every order share the match state.)
        # KenLM's GenericModel::FullScore (lm/model.cc): longest match first by
        # extending the hash one context word at a time (the keys in *hint), then
        # charge the back-offs of the context n-grams longer than the match.
        cdef const UniEntry *u
        cdef const MidEntry *me
        cdef const LongEntry *le
        cdef float prob
        cdef bint indep
        cdef int length = 1, next_use, i, n_ctx = hint.n
        cdef uint64_t node, b, _probes
        if w >= self.n_uni:
            w = 0
        u = &self.uni[w]
        prob = nplm_neg(u.prob)
        indep = nplm_signbit(u.prob)
        out.backoff[0] = u.backoff
        next_use = 1 if nplm_has_ext(u.backoff) else 0
        for i in range(n_ctx):
            if indep:
                break
            node = hint.key[i]
            b = hint.bucket[i]
            if i == self.order - 2:
                for _probes in range(self.long_buckets):
                    le = &self.longest[b]
                    if le.key == node:
                        prob = le.prob
                        length = self.order
                        break
                    if le.key == 0:
                        break
                    b += 1
                    if b == self.long_buckets:
                        b = 0
                break
            me = NULL
            for _probes in range(self.mid_buckets[i]):
                if self.mid[i][b].key == node:
                    me = &self.mid[i][b]
                    break
                if self.mid[i][b].key == 0:
                    break
                b += 1
                if b == self.mid_buckets[i]:
                    b = 0
            if me == NULL:
                break
            out.backoff[i + 1] = me.backoff
            prob = nplm_neg(me.prob)
            indep = nplm_signbit(me.prob)
            length = i + 2
            if nplm_has_ext(me.backoff):
                next_use = length
        # Context words after the new one: copy before writing out.words[0], in
        # case in_state and out_state are the same object.
        for i in range(next_use - 1, 0, -1):
            out.words[i] = ins.words[i - 1]
        out.words[0] = w
        for i in range(length - 1, n_ctx):
            prob += ins.backoff[i]
        out.length = <uint8_t>next_use
        ret.prob = prob
        ret.ngram_length = length
        return 0

    cdef int context_state(self, const WordId *words, int n, NState *out) except -1 nogil:
        # KenLM's GetState (lm/model.cc): the backoffs of the context n-grams that
        # exist, keeping the words up to the longest one that can be extended.
        cdef int i, length
        cdef uint64_t node, b, _probes
        cdef const MidEntry *me
        cdef WordId w0
        if n > self.order - 1:
            n = self.order - 1
        if n <= 0:
            out.length = 0
            return 0
        w0 = words[0] if words[0] < self.n_uni else 0
        out.backoff[0] = self.uni[w0].backoff
        length = 1 if nplm_has_ext(out.backoff[0]) else 0
        node = w0
        for i in range(1, n):
            node = nplm_combine(node, words[i])
            me = NULL
            b = nplm_fastrange(node, self.mid_buckets[i - 1])
            for _probes in range(self.mid_buckets[i - 1]):
                if self.mid[i - 1][b].key == node:
                    me = &self.mid[i - 1][b]
                    break
                if self.mid[i - 1][b].key == 0:
                    break
                b += 1
                if b == self.mid_buckets[i - 1]:
                    b = 0
            if me == NULL:
                break
            out.backoff[i] = me.backoff
            if nplm_has_ext(me.backoff):
                length = i + 1
        for i in range(length):
            out.words[i] = words[i]
        out.length = <uint8_t>length
        return 0

    def table_bytes(self):
        """Bytes held by the probability tables (for memory reports)."""
        uni, mids, longest = self._arrays
        return int(uni.nbytes + sum(m.nbytes for m in mids) + (longest.nbytes if longest is not None else 0))


# ---------------------------------------------------------------------------------
# Building the back-off tables from NGramTables arrays (KenLM's ARPA loading rules,
# lm/search_hashed.cc: contexts must exist, missing suffixes of pruned models get
# "blank" entries whose probability is the backed-off one).

cdef enum BuildError:
    BUILD_OK = 0
    BUILD_DUPLICATE = 1
    BUILD_NO_CONTEXT = 2
    BUILD_FULL = 3


cdef inline MidEntry *_mid_find_or_insert(MidEntry *t, uint64_t nb, uint64_t key,
                                          bint *found, uint64_t *used) noexcept nogil:
    cdef uint64_t b = nplm_fastrange(key, nb)
    while True:
        if t[b].key == key:
            found[0] = True
            return &t[b]
        if t[b].key == 0:
            if used[0] + 1 >= nb:
                return NULL
            found[0] = False
            t[b].key = key
            used[0] += 1
            return &t[b]
        b += 1
        if b == nb:
            b = 0


cdef inline MidEntry *_mid_find(MidEntry *t, uint64_t nb, uint64_t key) noexcept nogil:
    cdef uint64_t b = nplm_fastrange(key, nb)
    while True:
        if t[b].key == key:
            return &t[b]
        if t[b].key == 0:
            return NULL
        b += 1
        if b == nb:
            b = 0


cdef inline void _set_extension(float *backoff) noexcept nogil:
    if not nplm_has_ext(backoff[0]):
        backoff[0] = 0.0


@cython.boundscheck(False)
cdef int _insert_order(int n, int order, const int32_t[:, ::1] ids, const float[::1] probs,
                       const float[::1] backoffs, UniEntry *uni, MidEntry **mid,
                       uint64_t *mid_buckets, uint64_t *mid_used, LongEntry *longest,
                       uint64_t long_buckets, Py_ssize_t *bad) noexcept nogil:
    # (One function: KenLM's insert, FindLower, AdjustLower, MarkExtends, Activate share keys, between.)
    cdef Py_ssize_t j, count = ids.shape[0]
    cdef uint64_t keys[MAX_ORDER]
    cdef MidEntry *between[MAX_ORDER]
    cdef UniEntry *uni_between
    cdef int h, lower, n_between, basis
    cdef bint found
    cdef uint64_t key, b, backoff_hash
    cdef float prob, bo
    cdef MidEntry *e
    cdef MidEntry *ctx
    for j in range(count):
        # keys[h]: the (h+2)-gram suffix, built from the last word backwards.
        keys[0] = nplm_combine(<uint32_t>ids[j, n - 1], <uint32_t>ids[j, n - 2])
        for h in range(1, n - 1):
            keys[h] = nplm_combine(keys[h - 1], <uint32_t>ids[j, n - 2 - h])
        key = keys[n - 2]
        prob = nplm_neg(probs[j])
        if n == order:
            b = nplm_fastrange(key, long_buckets)
            while longest[b].key != 0:
                if longest[b].key == key:
                    bad[0] = j
                    return BUILD_DUPLICATE
                b += 1
                if b == long_buckets:
                    b = 0
            longest[b].key = key
            longest[b].prob = prob
        else:
            e = _mid_find_or_insert(mid[n - 2], mid_buckets[n - 2], key, &found, &mid_used[n - 2])
            if e == NULL:
                bad[0] = j
                return BUILD_FULL
            if found:
                # Blanks of this order are only inserted while reading longer
                # orders, so an existing key here is a repeated n-gram.
                bad[0] = j
                return BUILD_DUPLICATE
            bo = backoffs[j]
            e.backoff = bo if bo != 0.0 else nplm_no_ext()
            e.prob = prob
        # FindLower: the longest suffix present, inserting blanks for missing ones.
        n_between = 0
        uni_between = NULL
        lower = n - 3
        while True:
            if lower == -1:
                uni_between = &uni[ids[j, n - 1]]
                break
            e = _mid_find_or_insert(mid[lower], mid_buckets[lower], keys[lower], &found, &mid_used[lower])
            if e == NULL:
                bad[0] = j
                return BUILD_FULL
            between[n_between] = e
            n_between += 1
            if found:
                break
            e.backoff = nplm_no_ext()
            lower -= 1
        # AdjustLower: give blanks their backed-off probability.
        if n_between + (1 if uni_between != NULL else 0) > 1:
            if uni_between != NULL:
                prob = -fabsf(uni_between.prob)
                basis = 1
            else:
                prob = -fabsf(between[n_between - 1].prob)
                basis = n - n_between
            # between[i] is the (n - 1 - i)-gram suffix; blanks are the ones above basis.
            if basis == 1:
                _set_extension(&uni[ids[j, n - 2]].backoff)
                prob += uni[ids[j, n - 2]].backoff
                between[n - 3].prob = prob      # the bigram blank
                basis = 2
            backoff_hash = <uint32_t>ids[j, n - 2]
            for h in range(2, basis + 1):
                backoff_hash = nplm_combine(backoff_hash, <uint32_t>ids[j, n - 1 - h])
            while basis < n - 1:
                ctx = _mid_find(mid[basis - 2], mid_buckets[basis - 2], backoff_hash)
                if ctx != NULL:
                    _set_extension(&ctx.backoff)
                    prob += ctx.backoff
                # the (basis + 1)-gram blank
                between[n - 2 - basis].prob = prob
                backoff_hash = nplm_combine(backoff_hash, <uint32_t>ids[j, n - 2 - basis])
                basis += 1
        # MarkExtends: every entry on the way down extends left.
        for h in range(n_between):
            between[h].prob = nplm_pos(between[h].prob)
        if uni_between != NULL:
            uni_between.prob = nplm_pos(uni_between.prob)
        # Activate: the context (w_1 .. w_{n-1}) extends right.
        if n == 2:
            _set_extension(&uni[ids[j, 0]].backoff)
        else:
            backoff_hash = <uint32_t>ids[j, n - 2]
            for h in range(n - 3, -1, -1):
                backoff_hash = nplm_combine(backoff_hash, <uint32_t>ids[j, h])
            ctx = _mid_find(mid[n - 3], mid_buckets[n - 3], backoff_hash)
            if ctx == NULL:
                bad[0] = j
                return BUILD_NO_CONTEXT
            _set_extension(&ctx.backoff)
    return BUILD_OK


def _check_table_arrays(int order, Py_ssize_t vocab_size, list ids, list probs, list backoffs):
    """ValueError unless there is one (ids, probs, backoffs) triple of matching shapes per
    order 2..N, with word ids inside the vocabulary and N within MAX_ORDER (the length
    of build_backoff_tables' and _insert_order's arrays)."""
    cdef int n
    if order < 1 or order > MAX_ORDER:
        raise ValueError(f"order {order} outside 1..{MAX_ORDER}")
    if not len(ids) == len(probs) == len(backoffs) == order - 1:
        raise ValueError(f"expected {order - 1} arrays of ids, probabilities and back-offs")
    for n in range(2, order + 1):
        if np.ndim(ids[n - 2]) != 2 or np.shape(ids[n - 2])[1] != n \
                or not len(ids[n - 2]) == len(probs[n - 2]) == len(backoffs[n - 2]):
            raise ValueError(f"malformed {n}-gram arrays")
        if len(ids[n - 2]) and (np.min(ids[n - 2]) < 0 or np.max(ids[n - 2]) >= vocab_size):
            raise ValueError(f"{n}-gram word ids outside the vocabulary")


def build_backoff_tables(int order, uni, list ids, list probs, list backoffs, double multiplier=1.5,
                         list entries=None):
    """Fill probing tables from per-order arrays (engine word ids, oldest first).

    uni: float32 (V, 2) [prob, backoff], modified in place (extension and
    extends-left marks).  ids/probs/backoffs: one entry per order 2..N.
    entries: how many entries each middle order's table must hold (default: its
    n-grams; more where missing suffixes need blank entries).
    Returns (mids, longest) or raises _BuildError(code, order, index)."""
    cdef float[:, ::1] u = uni
    cdef Py_ssize_t k, nb
    cdef MidEntry *mid[MAX_ORDER]
    cdef uint64_t mid_buckets[MAX_ORDER]
    cdef uint64_t mid_used[MAX_ORDER]
    cdef uint64_t[:, ::1] mview
    cdef uint32_t[:, ::1] lview
    cdef Py_ssize_t bad = 0
    cdef int n, code
    cdef const int32_t[:, ::1] idv
    cdef const float[::1] pv
    cdef const float[::1] bv
    cdef Py_ssize_t i
    _check_table_arrays(order, u.shape[0], ids, probs, backoffs)
    # The unigram backoffs: zero means "does not extend" until a bigram says so.
    for i in range(u.shape[0]):
        if u[i, 1] == 0.0:
            u[i, 1] = nplm_no_ext()
    if entries is not None and len(entries) != max(order - 2, 0):
        raise ValueError(f"expected {max(order - 2, 0)} middle-order entry counts")
    mids = []
    for k in range(order - 2):
        n = len(probs[k]) if entries is None else max(<Py_ssize_t>entries[k], len(probs[k]))
        nb = max(<Py_ssize_t>(n * multiplier) + 1, n + 2)
        arr = np.zeros((nb, 2), dtype=np.uint64)
        mview = arr
        mid[k] = <MidEntry *>&mview[0, 0]
        mid_buckets[k] = nb
        mid_used[k] = 0
        mids.append(arr)
    longest = None
    if order >= 2:
        nb = max(<Py_ssize_t>(len(probs[order - 2]) * multiplier) + 1, len(probs[order - 2]) + 2)
        longest = np.zeros((nb, 3), dtype=np.uint32)
        lview = longest
    for n in range(2, order + 1):
        idv = ids[n - 2]
        pv = probs[n - 2]
        bv = backoffs[n - 2]
        with nogil:
            code = _insert_order(n, order, idv, pv, bv, <UniEntry *>&u[0, 0], mid, mid_buckets,
                                 mid_used, <LongEntry *>&lview[0, 0], lview.shape[0], &bad)
        if code != BUILD_OK:
            raise _BuildError(code, n, bad)
    return mids, longest


class _BuildError(Exception):
    """Raised by build_backoff_tables; the Python layer turns it into a FormatError."""
    DUPLICATE = BUILD_DUPLICATE
    NO_CONTEXT = BUILD_NO_CONTEXT
    FULL = BUILD_FULL

    def __init__(self, code, order, index):
        super().__init__(code, order, index)
        self.code = code
        self.order = order
        self.index = index
