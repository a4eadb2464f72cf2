# Query kernels every model kind shares: vocabulary hashing, the State and
# FullScoreReturn values of the kenlm API, the LMCore protocol, and the
# kenlm-compatible Python API over it (ModelBase) with batched scoring without the
# GIL.  The back-off engine is nplm/backoff/_query.pyx; the neural one
# nplm/neural/_query.pyx.
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcmp, memcpy, memset
from cython.parallel cimport prange

from nplm._words cimport is_word_delimiter

import numpy as np
cimport numpy as cnp

# thread counts and fork safety (re-exported: callers use _kernels.thread_count)
from nplm._threads import MAX_THREADS, cpu_count, thread_count  # no-cython-lint (re-exported)
from nplm.errors import MappedFileChanged

cnp.import_array()

# The highest order a model can have (MAX_ORDER of _kernels.pxd), for the Python layer.
QUERY_MAX_ORDER = MAX_ORDER

cdef enum:
    # Words a sentence's scoring hands to the core at once (LMCore.score_words).
    SCORE_RUN = 64

cdef extern from "mapguard.h":
    int nplm_guard_add(uintptr_t lo, uintptr_t hi) noexcept nogil
    void nplm_guard_remove(int slot, uintptr_t lo) noexcept nogil
    int nplm_guard_damaged(int slot, uintptr_t lo) noexcept nogil
    uint64_t nplm_guard_faults() noexcept nogil
    int nplm_guard_install() noexcept nogil


# The SIGBUS guard of mapped model files (nplm/src/mapguard.h; nplm.io._mapguard
# registers the mappings).  Its state lives here, beside the models that check it.

def guard_install():
    """Put the SIGBUS handler in place (once, from any thread; called with the GIL,
    so never twice at once).  False where sigaction refused."""
    return nplm_guard_install() == 0


def guard_add(const unsigned char[::1] view):
    """Register the mapped bytes ``view``: (slot, start address), or None when
    every slot is taken (the mapping then stays unguarded)."""
    cdef uintptr_t lo = <uintptr_t>&view[0]
    cdef int slot = nplm_guard_add(lo, lo + <uintptr_t>view.shape[0])
    return None if slot < 0 else (slot, lo)


def guard_remove(int slot, uintptr_t lo):
    nplm_guard_remove(slot, lo)


def guard_damaged(int slot, uintptr_t lo):
    """Whether the registered mapping (slot, lo) lost a page that was read."""
    return nplm_guard_damaged(slot, lo) != 0


cdef extern from "hash.h":
    uint64_t nplm_fastrange(uint64_t h, uint64_t n) noexcept nogil
    uint64_t nplm_hash_bytes(const char *s, Py_ssize_t n) noexcept nogil


# ---------------------------------------------------------------------------------
# Word hashing exposed for building tables in Python and for tests.

def hash_word(word):
    """64-bit hash of a word (str or bytes, hashed as UTF-8), as stored in the vocab."""
    cdef Py_ssize_t n
    word = _wordlike(word)
    cdef const char *s = _utf8(word, &n)
    return nplm_hash_bytes(s, n)


cdef inline object _wordlike(object s):
    """``s``, or its bytes when it is a str that UTF-8 cannot encode: a word read from
    text in another encoding holds each such byte as a lone surrogate
    (nplm.io.text.word_str), which _utf8 cannot return."""
    cdef Py_ssize_t n
    if isinstance(s, str):
        try:
            PyUnicode_AsUTF8AndSize(s, &n)      # (cached in the str for _utf8)
        except UnicodeEncodeError:
            return (<str>s).encode("utf-8", "surrogateescape")
    return s


cdef inline const char *_utf8(object s, Py_ssize_t *n) except NULL:
    """UTF-8 bytes of a str (cached by CPython, no copy for ASCII) or bytes; a str
    with surrogates must pass through _wordlike first."""
    if isinstance(s, str):
        return PyUnicode_AsUTF8AndSize(s, n)
    if isinstance(s, bytes):
        n[0] = PyBytes_GET_SIZE(s)
        return PyBytes_AS_STRING(s)
    raise TypeError(f"Cannot convert {type(s)} to string")


# ---------------------------------------------------------------------------------
# Vocabulary: word -> id by probing a table of 64-bit word hashes (like KenLM's
# ProbingVocabulary: only the hash is stored); id -> word through a byte blob.

def build_vocab_arrays(words, double multiplier=1.5, unreachable=(), bint first_wins=False):
    """Hash table arrays for ``words`` (a list of str; index = word id).  Entry 0 is
    the unknown word and is not inserted (a miss returns 0), nor is any word equal to
    ``<unk>``/``<UNK>`` or listed in ``unreachable`` (e.g. a neural model's <null>,
    which input text must not be able to name).  Returns (keys uint64, vals uint32, offsets int64, blob uint8)
    or raises ValueError naming a duplicate word; with ``first_wins`` a word listed again
    keeps its id but lookups find the first (KenLM's probing vocabulary)."""
    cdef Py_ssize_t n = len(words), i, m
    cdef uint64_t buckets = max(<uint64_t>(n * multiplier) + 1, <uint64_t>(n + 1))
    keys_a = np.zeros(buckets, dtype=np.uint64)
    vals_a = np.zeros(buckets, dtype=np.uint32)
    cdef uint64_t[::1] keys = keys_a
    cdef uint32_t[::1] vals = vals_a
    encoded = [w.encode("utf-8", "surrogateescape") if isinstance(w, str) else bytes(w) for w in words]
    offsets_a = np.zeros(n + 1, dtype=np.int64)
    cdef int64_t[::1] offsets = offsets_a
    cdef int64_t total = 0
    for i in range(n):
        offsets[i] = total
        total += len(encoded[i])
    offsets[n] = total
    blob = b"".join(encoded)
    cdef uint64_t h, b
    cdef const char *s
    cdef bint again
    skip = {b"<unk>", b"<UNK>"} | {u.encode("utf-8", "surrogateescape") for u in unreachable}
    for i in range(1, n):
        w = encoded[i]
        if w in skip:
            continue
        s = PyBytes_AS_STRING(w)
        m = PyBytes_GET_SIZE(w)
        h = nplm_hash_bytes(s, m)
        b = nplm_fastrange(h, buckets)
        again = False
        while keys[b] != 0:
            if keys[b] == h:
                other = encoded[vals[b]]
                if other == w and first_wins:
                    again = True
                    break
                if other == w:
                    raise ValueError(f"duplicate word {words[i]!r} in the vocabulary")
                raise ValueError(f"64-bit hash collision between words {other!r} and {w!r}")
            b += 1
            if b == buckets:
                b = 0
        if not again:
            keys[b] = h
            vals[b] = <uint32_t>i
    return keys_a, vals_a, offsets_a, np.frombuffer(blob, dtype=np.uint8).copy() if blob else np.zeros(0, np.uint8)


cdef class Vocab:
    """Word <-> id for a model.  Unknown words map to 0 (``<unk>``), as kenlm maps
    any string it does not know.  ``word(i)``/``words()`` list every id, internal ones
    included, but a neural model's padding word ``<null>`` (id 3) cannot be looked up:
    ``id("<null>")`` is 0, so a literal "<null>" in the text scores as an unknown word
    and never as the padding a short context is filled with.  ``id(word(i)) == i`` holds
    for every other id (and for ``<unk>``, 0)."""

    def __init__(self, keys, vals, offsets, blob):
        self._keys = keys
        self._vals = vals
        self._offsets = offsets
        self._blob = blob
        self.buckets = keys.shape[0]
        if self.buckets == 0 or vals.shape[0] != self.buckets or offsets.shape[0] < 1:
            raise ValueError("malformed vocabulary arrays")
        self.keys = &self._keys[0]
        self.vals = &self._vals[0]
        self.size = offsets.shape[0] - 1

    cdef WordId index(self, const char *s, Py_ssize_t n) noexcept nogil:
        cdef uint64_t h = nplm_hash_bytes(s, n)
        cdef uint64_t b = nplm_fastrange(h, self.buckets)
        cdef uint64_t k, _probes
        # Bounded so that a corrupt table without empty buckets cannot hang.
        for _probes in range(self.buckets):
            k = self.keys[b]
            if k == h:
                return self.vals[b]
            if k == 0:
                return 0
            b += 1
            if b == self.buckets:
                b = 0
        return 0

    def id(self, word):
        """Id of ``word`` (str or bytes); 0 for unknown words."""
        cdef Py_ssize_t n
        word = _wordlike(word)
        cdef const char *s = _utf8(word, &n)
        return self.index(s, n)

    def word(self, Py_ssize_t i):
        """The word with id ``i`` (str)."""
        if i < 0 or i >= self.size:
            raise IndexError(f"word id {i} out of range 0..{self.size - 1}")
        return bytes(self._blob[self._offsets[i]:self._offsets[i + 1]]).decode("utf-8", "surrogateescape")

    def ids(self, words):
        """Ids of a sequence of words as an int32 array."""
        out = np.empty(len(words), dtype=np.int32)
        cdef int32_t[::1] o = out
        cdef Py_ssize_t i = 0, n
        cdef const char *s
        for w in words:
            w = _wordlike(w)
            s = _utf8(w, &n)
            o[i] = self.index(s, n)
            i += 1
        return out

    def words(self):
        """All words, in id order (id 0 first)."""
        return [self.word(i) for i in range(self.size)]

    def __len__(self):
        return self.size

    def arrays(self):
        return {"vocab_keys": np.asarray(self._keys), "vocab_vals": np.asarray(self._vals),
                "vocab_offsets": np.asarray(self._offsets), "vocab_blob": np.asarray(self._blob)}


# ---------------------------------------------------------------------------------
# State and FullScoreReturn: the Python-visible values of the kenlm API.

cdef inline State _state(object state, str name):
    """``state`` as nplm's State, or a TypeError that names the fix (a state of the
    real kenlm module, whose C++ context nplm cannot read, included)."""
    if type(state) is State or isinstance(state, State):
        return <State>state
    if state is None:
        raise TypeError(f"Argument '{name}' must not be None")
    kind = f"{type(state).__module__}.{type(state).__name__}"
    raise TypeError(f"Argument '{name}' has incorrect type (expected nplm.State, got {kind})"
                    + ("; a kenlm.State holds the real kenlm's context, which nplm models cannot read: "
                       "create the states of nplm models with nplm.State()" if kind == "kenlm.State" else ""))


cdef class State:
    """A language-model context (kenlm.State).  Compare and hash states to
    recombine hypotheses: equal states give identical future scores.  Unlike
    kenlm's, it can be deep-copied and pickled."""

    def __init__(self):
        memset(&self._c, 0, sizeof(NState))

    def __richcmp__(State self, other, int op):
        cdef int c
        cdef State o
        if not isinstance(other, State):
            # As kenlm: a TypeError against anything but a State, except that a State
            # is never equal to None nor to the real kenlm module's State (a program
            # that imports both compares them).
            if (op == 2 or op == 3) and (other is None or type(other).__module__ == "kenlm"):
                return op == 3
            raise TypeError(f"Argument 'other' has incorrect type (expected nplm.State, "
                            f"got {type(other).__name__})")
        o = <State>other
        if self._c.length != o._c.length:
            c = -1 if self._c.length < o._c.length else 1
        else:
            c = memcmp(self._c.words, o._c.words, self._c.length * sizeof(WordId))
        if op == 0:
            return c < 0
        if op == 1:
            return c <= 0
        if op == 2:
            return c == 0
        if op == 3:
            return c != 0
        if op == 4:
            return c > 0
        return c >= 0

    def __hash__(self):
        return hash((<char *>self._c.words)[:self._c.length * sizeof(WordId)])

    def __copy__(self):
        cdef State s = State.__new__(State)
        s._c = self._c
        return s

    def __deepcopy__(self, memo=None):
        return self.__copy__()

    def __reduce__(self):
        return (_state_from_bytes, ((<char *>&self._c)[:sizeof(NState)],))

    @property
    def length(self):
        """Number of context words the state keeps (after KenLM's minimisation)."""
        return self._c.length

    @property
    def words(self):
        """The context word ids, most recent first."""
        return tuple(self._c.words[i] for i in range(self._c.length))

    def __repr__(self):
        return f"State(length={self._c.length}, words={self.words})"


def _state_from_bytes(bytes raw):
    cdef State s = State.__new__(State)
    if len(raw) != sizeof(NState):
        raise ValueError("State pickle from an incompatible nplm build")
    memcpy(&s._c, PyBytes_AS_STRING(raw), sizeof(NState))
    if s._c.length >= MAX_ORDER:
        raise ValueError("corrupt State pickle")
    return s


cdef class FullScoreReturn:
    """Result of BaseFullScore: log10 probability, matched n-gram length, OOV flag."""
    cdef readonly float log_prob
    cdef readonly int ngram_length
    cdef readonly bint oov

    def __init__(self, log_prob, ngram_length, oov):
        self.log_prob = log_prob
        self.ngram_length = ngram_length
        self.oov = oov

    def __repr__(self):
        return f"FullScoreReturn({self.log_prob!r}, {self.ngram_length!r}, {self.oov!r})"

    def __eq__(self, other):
        if not isinstance(other, FullScoreReturn):
            return NotImplemented
        return (self.log_prob, self.ngram_length, self.oov) == (other.log_prob, other.ngram_length, other.oov)

    def __hash__(self):
        # kenlm's FullScoreReturn is hashable (by identity); equal values hash equal here.
        return hash((self.log_prob, self.ngram_length, self.oov))

    def __reduce__(self):
        return (FullScoreReturn, (self.log_prob, self.ngram_length, self.oov))


# ---------------------------------------------------------------------------------
# The scoring protocol.

cdef class LMCore:
    """Base of every model kind's scorer.  Subclasses implement score_word (with
    KenLM's semantics) and may override begin_state / null_state."""

    cdef int score_word(self, const NState *in_state, WordId word, NState *out_state,
                        Ret *ret) except -1 nogil:
        with gil:
            raise NotImplementedError("score_word")

    cdef int score_words(self, const NState *in_state, const WordId *words, int n, NState *out_state,
                         Ret *rets) except -1 nogil:
        """score_word over words[0..n) in turn from in_state: rets[i] is word i's
        result, out_state (which may be in_state) the state after the last.  Kinds
        whose lookups gain from seeing a run of words at once override it."""
        cdef NState st[2]
        cdef int i, cur = 0
        st[0] = in_state[0]
        for i in range(n):
            self.score_word(&st[cur], words[i], &st[1 - cur], &rets[i])
            cur = 1 - cur
        out_state[0] = st[cur]
        return 0

    cdef void prefetch(self, const NState *in_state, WordId word, Hint *hint) noexcept nogil:
        """A sign that score_hinted(in_state, word, hint) follows soon: a model whose
        lookups miss the CPU caches requests the memory now, so that a caller can
        overlap several lookups' waits (the n-best rescorer does), and keeps in
        *hint what it worked out.  Default: nothing."""
        hint.n = -1

    cdef int score_hinted(self, const NState *in_state, WordId word, const Hint *hint,
                          NState *out_state, Ret *ret) except -1 nogil:
        """score_word(in_state, word), given the *hint that prefetch(in_state, word)
        filled (the same numbers).  Default: score_word."""
        return self.score_word(in_state, word, out_state, ret)

    cdef void begin_state(self, NState *out) noexcept nogil:
        out.length = 1
        out.words[0] = self.bos_id
        out.backoff[0] = 0.0

    cdef void null_state(self, NState *out) noexcept nogil:
        out.length = 0

    cdef int context_state(self, const WordId *words, int n, NState *out) except -1 nogil:
        """The state after the context ``words`` (most recent first, ``n`` of them),
        as if they had been scored (KenLM's GetState).  Default: keep the last
        order - 1 words."""
        cdef int i
        if n > self.order - 1:
            n = self.order - 1
        for i in range(n):
            out.words[i] = words[i]
            out.backoff[i] = 0.0
        out.length = <uint8_t>n
        return 0

    def state_for(self, words):
        """Python access to context_state: ``words`` are ids, oldest first."""
        cdef State s = State()
        cdef WordId buf[MAX_ORDER]
        cdef int n = min(len(words), MAX_ORDER - 1), i
        for i in range(n):
            buf[i] = <WordId>words[len(words) - 1 - i]
        self.context_state(buf, n, &s._c)
        return s


# ---------------------------------------------------------------------------------
# Batch totals.

@cython.boundscheck(False)
def segment_sums(const float[::1] probs, const int64_t[::1] offsets):
    """Sum of each segment probs[offsets[i]:offsets[i+1]] as float64, added one by
    one in a float32 total as score() (and kenlm) does; 0.0 for an empty one."""
    cdef Py_ssize_t m = offsets.shape[0] - 1, i
    cdef int64_t j
    if m < 0 or offsets[0] < 0 or offsets[m] > probs.shape[0]:
        raise ValueError("offsets outside the probabilities")
    for i in range(m):
        if offsets[i + 1] < offsets[i]:
            raise ValueError("offsets must be non-decreasing")
    out = np.empty(m, dtype=np.float64)
    cdef double[::1] o = out
    cdef float total
    with nogil:
        for i in range(m):
            total = 0
            for j in range(offsets[i], offsets[i + 1]):
                total += probs[j]
            o[i] = total
    return out


# ---------------------------------------------------------------------------------
# Arguments of the batch API, checked the same way for every model kind.

def sentence_list(sentences):
    """``sentences`` (a list, or any iterable, of str/bytes) as a list.  A single
    string is refused: iterating it would score each character as a sentence."""
    if isinstance(sentences, (str, bytes)):
        raise TypeError(f"expected a list of sentences, got a single {type(sentences).__name__}; "
                        f"wrap it in a list")
    try:
        keep = list(sentences)
    except TypeError:
        raise TypeError(f"expected a list of sentences (str or bytes), got "
                        f"{type(sentences).__name__}") from None
    for i, s in enumerate(keep):
        if not isinstance(s, (str, bytes)):
            raise TypeError(f"sentence {i} is {type(s).__name__}, expected str or bytes")
        keep[i] = _wordlike(s)
    return keep


# ---------------------------------------------------------------------------------
# The kenlm-compatible API, written once over (LMCore, Vocab).

cdef class ModelBase:
    """Everything of kenlm.Model that is not loading: scoring, states, vocabulary.
    Subclasses (nplm.Model) load a file and call _attach(core, vocab)."""
    cdef LMCore _core
    cdef Vocab _vocab
    cdef WordId _eos
    cdef uint64_t _faults_seen
    cdef readonly tuple _mapped       # (slot, address, path) of each mapped file it reads

    def _attach(self, LMCore core, Vocab vocab, mapped=()):
        self._core = core
        self._vocab = vocab
        self._eos = core.eos_id
        self._mapped = tuple(mapped)
        self._faults_seen = nplm_guard_faults()

    cdef inline void _check(self) except *:
        if self._core is None:
            raise RuntimeError("model is not loaded")
        self._check_mapped()

    cdef inline void _check_mapped(self) except *:
        # A page of a mapped file was lost somewhere since this model last looked:
        # one of its own files (now or during the call just made) is an error in
        # this thread; another model's is not its concern.
        if nplm_guard_faults() != self._faults_seen:
            self._mapping_lost()

    def _mapping_lost(self):
        cdef uint64_t now = nplm_guard_faults()
        for slot, lo, path in self._mapped or ():
            if nplm_guard_damaged(slot, lo):
                raise MappedFileChanged("the model file was truncated while it was loaded (memory-mapped); "
                                        "the model's scores are no longer valid: load it again", path)
        self._faults_seen = now

    def check_mapped(self):
        """Raise MappedFileChanged when a file this model maps lost a page that was
        read (truncated while loaded); the scoring methods check it themselves."""
        self._check_mapped()

    @property
    def core(self):
        """The model's scorer (an LMCore), for composing models."""
        return self._core

    @property
    def order(self):
        """The model's n-gram order."""
        self._check()
        return self._core.order

    @property
    def vocab(self):
        """The model's Vocab (word <-> id; len() is the vocabulary size)."""
        return self._vocab

    def score(self, sentence, bos=True, eos=True):
        """log10 p(sentence [</s>] | [<s>]): the total log10 probability of a string
        of whitespace-separated words (str or bytes).  Same semantics as kenlm:
        with ``bos`` the context starts as <s>, with ``eos`` </s> is scored at the
        end; do not include <s> in the string.  Accumulated in float32 like kenlm."""
        self._check()
        cdef Py_ssize_t n
        sentence = _wordlike(sentence)
        cdef const char *s = _utf8(sentence, &n)
        cdef float total = 0
        self._score_buf(s, n, bos, eos, &total, NULL, NULL, NULL, 0)
        self._check_mapped()
        return total

    cdef Py_ssize_t _score_buf(self, const char *s, Py_ssize_t n, bint bos, bint eos, float *total,
                               float *probs, int32_t *lengths, uint8_t *oovs, Py_ssize_t cap) except -1 nogil:
        """Score the tokens of s[:n]; optionally record per-token results (up to cap).
        Returns the number of items scored (tokens + </s>).  The words go to the core
        in runs of up to SCORE_RUN (LMCore.score_words)."""
        cdef NState st
        cdef WordId ids[SCORE_RUN]
        cdef Ret rets[SCORE_RUN]
        cdef Py_ssize_t i = 0, start, count = 0
        cdef int k = 0
        if bos:
            self._core.begin_state(&st)
        else:
            self._core.null_state(&st)
        while True:
            while i < n and is_word_delimiter(s[i]):
                i += 1
            if i >= n:
                break
            start = i
            while i < n and not is_word_delimiter(s[i]):
                i += 1
            ids[k] = self._vocab.index(s + start, i - start)
            k += 1
            if k == SCORE_RUN:
                count = self._score_run(&st, ids, k, rets, total, probs, lengths, oovs, cap, count, False)
                k = 0
        if eos:
            ids[k] = self._eos
            k += 1
        if k > 0:
            count = self._score_run(&st, ids, k, rets, total, probs, lengths, oovs, cap, count, eos)
        return count

    cdef Py_ssize_t _score_run(self, NState *st, const WordId *ids, int k, Ret *rets, float *total, float *probs,
                               int32_t *lengths, uint8_t *oovs, Py_ssize_t cap, Py_ssize_t count,
                               bint ends_with_eos) except -1 nogil:
        """Score the run ids[0..k) from st (left as the state after it), adding to
        total in order and recording items from index ``count`` on; returns the new
        count.  With ends_with_eos the last id is </s> (never an OOV)."""
        cdef int j
        self._core.score_words(st, ids, k, st, rets)
        for j in range(k):
            total[0] += rets[j].prob
            if count < cap:
                probs[count] = rets[j].prob
                lengths[count] = rets[j].ngram_length
                oovs[count] = ids[j] == 0 and not (ends_with_eos and j == k - 1)
            count += 1
        return count

    def full_scores(self, sentence, bos=True, eos=True):
        """Iterate (log10_prob, ngram_length, oov) per word, plus one for </s> when
        ``eos``: kenlm's full_scores."""
        self._check()
        cdef Py_ssize_t n, m, k
        sentence = _wordlike(sentence)
        cdef const char *s = _utf8(sentence, &n)
        cdef float total = 0
        # A sentence of n bytes has at most n // 2 + 1 tokens, plus </s>.  Short
        # sentences use stack buffers (no allocation per call).
        cdef Py_ssize_t cap = n // 2 + 2
        cdef float p_small[256]
        cdef int32_t l_small[256]
        cdef uint8_t o_small[256]
        cdef float *pv = p_small
        cdef int32_t *lv = l_small
        cdef uint8_t *ov = o_small
        if cap > 256:
            buf = np.empty(cap * 9, dtype=np.uint8)
            pv = <float *>cnp.PyArray_DATA(buf)
            lv = <int32_t *>(pv + cap)
            ov = <uint8_t *>(lv + cap)
        m = self._score_buf(s, n, bos, eos, &total, pv, lv, ov, cap)
        self._check_mapped()
        cdef list out = [None] * m
        for k in range(m):
            out[k] = (<double>pv[k], lv[k], ov[k] != 0)
        return iter(out)

    def perplexity(self, sentence):
        """10 ** (-score(sentence) / (words + 1)): kenlm's per-sentence perplexity
        (bos and eos on, OOVs included)."""
        self._check()
        cdef Py_ssize_t n
        sentence = _wordlike(sentence)
        cdef const char *s = _utf8(sentence, &n)
        cdef float total = 0
        cdef Py_ssize_t count = self._score_buf(s, n, True, True, &total, NULL, NULL, NULL, 0)
        self._check_mapped()
        # kenlm divides score()'s float32 total, widened, in double (Python floats);
        # -total / count here would divide in float32.
        cdef double t = total
        # A Python float power, as kenlm's: OverflowError where the result overflows.
        cdef object ten = 10.0
        return ten ** (-t / <double>count)

    def BeginSentenceWrite(self, state):
        """Overwrite ``state`` with the beginning-of-sentence context."""
        cdef State s = _state(state, "state")
        self._check()
        self._core.begin_state(&s._c)

    def NullContextWrite(self, state):
        """Overwrite ``state`` with the empty context."""
        cdef State s = _state(state, "state")
        self._check()
        self._core.null_state(&s._c)

    def BaseScore(self, in_state, word, out_state):
        """log10 p(word | in_state); writes the successor context to out_state.
        ``word`` may be str or bytes, and in_state may be out_state."""
        cdef State si = _state(in_state, "in_state"), so = _state(out_state, "out_state")
        self._check()
        cdef Py_ssize_t n
        word = _wordlike(word)
        cdef const char *s = _utf8(word, &n)
        cdef Ret ret
        cdef NState tmp = si._c
        self._core.score_word(&tmp, self._vocab.index(s, n), &so._c, &ret)
        self._check_mapped()
        return ret.prob

    def BaseFullScore(self, in_state, word, out_state):
        """Like BaseScore, returning FullScoreReturn(log_prob, ngram_length, oov)."""
        cdef State si = _state(in_state, "in_state"), so = _state(out_state, "out_state")
        self._check()
        cdef Py_ssize_t n
        word = _wordlike(word)
        cdef const char *s = _utf8(word, &n)
        cdef Ret ret
        cdef NState tmp = si._c
        cdef WordId w = self._vocab.index(s, n)
        self._core.score_word(&tmp, w, &so._c, &ret)
        self._check_mapped()
        return FullScoreReturn(ret.prob, ret.ngram_length, w == 0)

    def __contains__(self, word):
        cdef Py_ssize_t n
        word = _wordlike(word)
        cdef const char *s = _utf8(word, &n)
        cdef bint known = self._vocab.index(s, n) != 0
        self._check_mapped()
        return known

    # --- beyond kenlm: ids, distributions and batches --------------------------

    def score_id(self, State in_state not None, Py_ssize_t word_id, State out_state not None):
        """BaseFullScore by word id: returns (log10_prob, ngram_length)."""
        self._check()
        cdef Ret ret
        cdef NState tmp = in_state._c
        if word_id < 0 or word_id >= self._vocab.size:
            raise IndexError(f"word id {word_id} out of range")
        self._core.score_word(&tmp, <WordId>word_id, &out_state._c, &ret)
        self._check_mapped()
        return ret.prob, ret.ngram_length

    def log10_distribution(self, State state not None):
        """log10 p(w | state) for every word id w (numpy float32 of vocabulary
        size), in one call.  Entry 0 is <unk>; the entry of <s> is whatever the
        model gives it (lmplz: p(<s>) = 1, i.e. only back-off penalties)."""
        self._check()
        cdef Py_ssize_t v = self._vocab.size, w
        out = np.empty(v, dtype=np.float32)
        cdef float[::1] o = out
        cdef NState tmp
        cdef Ret ret
        with nogil:
            for w in range(v):
                self._core.score_word(&state._c, <WordId>w, &tmp, &ret)
                o[w] = ret.prob
        self._check_mapped()
        return out

    def score_sentences(self, sentences, bos=True, eos=True, threads=None):
        """Total log10 probability of each sentence (a list, or any iterable, of
        str/bytes) as a float64 array: equal to [score(s, bos, eos) for s in
        sentences], computed in one call without the GIL (``threads`` > 1 splits
        the work; None, the default, is 1 here and the OpenMP default for a
        neural model's kernels)."""
        self._check()
        cdef int nthreads = 1 if threads is None else thread_count(threads)
        keep = sentence_list(sentences)
        cdef Py_ssize_t m = len(keep), i
        ptrs = np.empty(m, dtype=np.uintp)
        lens = np.empty(m, dtype=np.intp)
        cdef size_t[::1] pv = ptrs
        cdef Py_ssize_t[::1] lv = lens
        cdef Py_ssize_t n
        for i in range(m):
            pv[i] = <size_t>_utf8(keep[i], &n)
            lv[i] = n
        out = np.empty(m, dtype=np.float64)
        cdef double[::1] o = out
        cdef float total
        cdef bint b = bos, e = eos
        if nthreads == 1 or m < 64:
            with nogil:
                for i in range(m):
                    total = 0
                    self._score_buf(<const char *>pv[i], lv[i], b, e, &total, NULL, NULL, NULL, 0)
                    o[i] = total
        else:
            for i in prange(m, nogil=True, schedule="dynamic", chunksize=256, num_threads=nthreads):
                total = 0
                self._score_buf(<const char *>pv[i], lv[i], b, e, &total, NULL, NULL, NULL, 0)
                o[i] = total
        self._check_mapped()
        return out

    def full_scores_batch(self, sentences, bos=True, eos=True):
        """Per-token results of many sentences in flat arrays: returns
        (log10_prob float32, ngram_length int32, oov bool, offsets int64) where
        sentence i's items are [offsets[i]:offsets[i+1]] (tokens, then </s>)."""
        self._check()
        keep = sentence_list(sentences)
        cdef Py_ssize_t m = len(keep), i, n, total_cap = 0, pos = 0, got
        ptrs = np.empty(m, dtype=np.uintp)
        lens = np.empty(m, dtype=np.intp)
        cdef size_t[::1] pv = ptrs
        cdef Py_ssize_t[::1] lv = lens
        for i in range(m):
            pv[i] = <size_t>_utf8(keep[i], &n)
            lv[i] = n
            total_cap += n // 2 + 2
        probs = np.empty(total_cap + 1, dtype=np.float32)
        lengths = np.empty(total_cap + 1, dtype=np.int32)
        oovs = np.empty(total_cap + 1, dtype=np.uint8)
        offsets = np.empty(m + 1, dtype=np.int64)
        cdef float[::1] p = probs
        cdef int32_t[::1] l = lengths
        cdef uint8_t[::1] ov = oovs
        cdef int64_t[::1] off = offsets
        cdef float total
        cdef bint b = bos, e = eos
        with nogil:
            for i in range(m):
                off[i] = pos
                total = 0
                got = self._score_buf(<const char *>pv[i], lv[i], b, e, &total,
                                      &p[pos], &l[pos], &ov[pos], lv[i] // 2 + 2)
                pos += got
            off[m] = pos
        self._check_mapped()
        return probs[:pos], lengths[:pos], oovs[:pos].view(bool), offsets
