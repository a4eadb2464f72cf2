"""KenLM's binary model format: the header and where every part of a file lies.

KenLM (kpu/kenlm, binary format version 5, x86-64) writes one memory-mappable file
per model with ``build_binary``.  This module describes that format in pure Python so
that the reader (which maps the file and hands the sections to the query kernels)
and the writer (which lays out the same sections) share one description.  Nothing
here reads more than a few header bytes.

A file is::

    header          Sanity (88 bytes: magic, test values of the type sizes),
                    FixedWidthParameters (20 bytes), counts (uint64 per order),
                    zero padding to a multiple of 8
    vocabulary      the word-hash lookup (probing hash table or sorted array)
    search          the n-gram tables (probing hash tables or the bit-packed trie)
    strings         optional: the words, NUL-terminated, in word-id order,
                    "<unk>" first (absent when built with ``-v``)

Word hashes are MurmurHash64A (seed 0) of the word's bytes.  ``<unk>`` and ``<UNK>``
are never in the lookup: a miss is id 0.  Every size below follows the C++ code
exactly (including float arithmetic where KenLM uses floats), since the offsets of
the later sections depend on them.
"""
import importlib
import math
import struct

# --- the header ----------------------------------------------------------------------

MAGIC_PREFIX = b"mmap lm http://kheafield.com/code format version"
MAGIC = b"mmap lm http://kheafield.com/code format version 5\n\0"
MAGIC_INCOMPLETE = b"mmap lm http://kheafield.com/code incomplete\n"
FORMAT_VERSION = 5
# The magic (with C's terminating NUL: sizeof == 53) padded to 56 bytes, then test
# values that differ when a file comes from a build with other type sizes or float
# encoding: 0.0f, 1.0f, -0.5f, WordIndex 1, WordIndex max (32-bit ids), padding,
# uint64 1.
_SANITY_TAIL = struct.Struct("<fffIIIQ")
SANITY = MAGIC.ljust(56, b"\0") + _SANITY_TAIL.pack(0.0, 1.0, -0.5, 1, 0xFFFFFFFF, 0, 1)
SANITY_SIZE = len(SANITY)            # 88
# FixedWidthParameters: unsigned char order, float probing_multiplier, ModelType
# (int enum), bool has_vocabulary, unsigned int search_version (C struct padding).
FIXED = struct.Struct("<B3xfiB3xI")  # 20 bytes

PROBING, REST_PROBING, TRIE, QUANT_TRIE, ARRAY_TRIE, QUANT_ARRAY_TRIE = range(6)
MODEL_NAMES = ("probing hash tables", "probing hash tables with rest costs", "trie",
               "trie with quantization", "trie with array-compressed pointers",
               "trie with quantization and array-compressed pointers")
# search_version of each data structure (HashedSearch::kVersion, TrieSearch::kVersion).
SEARCH_VERSION = {PROBING: 0, REST_PROBING: 0, TRIE: 1, QUANT_TRIE: 1, ARRAY_TRIE: 1,
                  QUANT_ARRAY_TRIE: 1}
PROBING_VOCAB_VERSION = 0            # ProbingVocabularyHeader.version
QUANT_VERSION = 2                    # SeparatelyQuantize's first byte
BHIKSHA_VERSION = 0                  # ArrayBhiksha's first byte
# KenLM's default compile-time KENLM_MAX_ORDER (the kenlm Python module's).
KENLM_DEFAULT_MAX_ORDER = 6
NO_EXTENSION_BACKOFF = -0.0          # back-off marking "nothing extends this n-gram"


class KenlmFormatError(ValueError):
    """Raised by this module; the reader turns it into a FormatError naming the file."""


def align8(n):
    """KenLM's ALIGN8: n rounded up to a multiple of 8 (n >= 1)."""
    return ((n - 1) // 8 + 1) * 8


def header_size(order):
    """Bytes of the header (TotalHeaderSize): sanity, parameters, counts, padding."""
    return align8(SANITY_SIZE + FIXED.size + 8 * order)


class _Record:
    """An immutable record of the named ``__slots__`` (positional or keyword
    arguments, trailing ``_defaults``), compared and shown as a tuple of its fields.
    Plain classes: namedtuples and dataclasses compile code for each class, which
    would cost the query program's start-up milliseconds."""
    __slots__ = ()
    _defaults = ()

    def __init__(self, *args, **kw):
        names = type(self).__slots__
        defaults = dict(zip(names[len(names) - len(self._defaults):], self._defaults))
        values = dict(zip(names, args))
        for n in names[len(args):]:
            values[n] = kw.pop(n) if n in kw else defaults.get(n, kw)
        if kw or len(args) > len(names) or any(v is kw for v in values.values()):
            raise TypeError(f"{type(self).__name__} takes the fields {names}")
        for n in names:
            object.__setattr__(self, n, values[n])

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _tuple(self):
        return tuple(getattr(self, n) for n in type(self).__slots__)

    def __eq__(self, other):
        return type(self) is type(other) and self._tuple() == other._tuple()

    def __hash__(self):
        return hash(self._tuple())

    def __repr__(self):
        return f"{type(self).__name__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in type(self).__slots__) + ")"


class Header(_Record):
    """FixedWidthParameters and the counts of a KenLM binary."""
    __slots__ = ("order", "probing_multiplier", "model_type", "has_vocabulary", "search_version", "counts")
    # probing_multiplier: the float32 value, widened
    # counts: n-grams of each order; [0] is the vocabulary size

    @property
    def size(self):
        return header_size(self.order)

    @property
    def model_name(self):
        return MODEL_NAMES[self.model_type]

    @property
    def is_trie(self):
        return self.model_type >= TRIE

    @property
    def quantized(self):
        return self.model_type in (QUANT_TRIE, QUANT_ARRAY_TRIE)

    @property
    def array_pointers(self):
        return self.model_type in (ARRAY_TRIE, QUANT_ARRAY_TRIE)


def looks_like_kenlm(head):
    """Whether ``head`` (a file's first bytes) is a KenLM binary of any version, or an
    unfinished one: what the reader must claim (and then explain if it cannot load)."""
    return head.startswith(MAGIC_PREFIX) or head.startswith(MAGIC_INCOMPLETE)


def check_sanity(head):
    """Raise KenlmFormatError explaining why ``head`` is not a loadable version-5
    header (KenLM's IsBinaryFormat); return None when it is."""
    if head[:SANITY_SIZE] == SANITY:
        return
    if head.startswith(MAGIC_INCOMPLETE):
        raise KenlmFormatError("this KenLM binary file did not finish building")
    if not head.startswith(MAGIC_PREFIX):
        raise KenlmFormatError("not a KenLM binary file (bad magic)")
    rest = head[len(MAGIC_PREFIX):len(MAGIC_PREFIX) + 12].lstrip(b" ")
    digits = rest[:len(rest) - len(rest.lstrip(b"0123456789"))]
    if digits and int(digits) != FORMAT_VERSION:
        raise KenlmFormatError(f"KenLM binary format version {int(digits)}; this reader reads version "
                               f"{FORMAT_VERSION} (rebuild the binary from the ARPA with a current build_binary)")
    if len(head) < SANITY_SIZE:
        raise KenlmFormatError(f"truncated KenLM binary file ({len(head)} bytes; the header needs "
                               f"{SANITY_SIZE})")
    raise KenlmFormatError("KenLM binary from a build with other type sizes or float encoding (its test "
                           "values do not match: 64-bit word ids or another architecture); rebuild it "
                           "from the ARPA with a standard build_binary")


def parse_header(head, file_size=None, max_order=None):  # noqa: C901 - one check per header field, each with its message
    """The Header of a file whose first bytes are ``head`` (at least
    header_size(order) of them, or the whole file; ``file_size``, when given, is the
    whole file's).  Checks what KenLM checks and what must hold for the sizes below to
    be meaningful; whether the file is as long as its layout says is the caller's
    check."""
    if file_size is not None and file_size < len(head):
        raise KenlmFormatError(f"file size {file_size} is smaller than the {len(head)} header bytes given")
    check_sanity(head)
    end_fixed = SANITY_SIZE + FIXED.size
    if len(head) < end_fixed:
        raise KenlmFormatError(f"truncated KenLM binary file ({len(head)} bytes; the header needs {end_fixed})")
    order, multiplier, model_type, has_vocab, search_version = FIXED.unpack_from(head, SANITY_SIZE)
    if not 0 <= model_type < len(MODEL_NAMES):
        raise KenlmFormatError(f"unknown KenLM model type {model_type}")
    if search_version != SEARCH_VERSION[model_type]:
        raise KenlmFormatError(f"{MODEL_NAMES[model_type]} version {search_version}; this reader reads "
                               f"version {SEARCH_VERSION[model_type]}")
    if has_vocab not in (0, 1):
        raise KenlmFormatError(f"corrupt header (has_vocabulary byte {has_vocab})")
    if order < 2:
        raise KenlmFormatError(f"order {order}: KenLM binaries hold at least bigrams")
    if max_order is not None and order > max_order:
        raise KenlmFormatError(f"order {order} is above the highest order this reader supports ({max_order})")
    if not multiplier >= 1.0 or not math.isfinite(multiplier):
        raise KenlmFormatError(f"probing multiplier {multiplier} (must be a finite number >= 1.0)")
    need = header_size(order)
    if len(head) < need:
        raise KenlmFormatError(f"truncated KenLM binary file ({len(head)} bytes; the header needs {need})")
    counts = struct.unpack_from(f"<{order}Q", head, end_fixed)
    for n, c in enumerate(counts, 1):
        if c >= 1 << 56:    # KenLM's bit packing stops at 2**57 entries
            raise KenlmFormatError(f"corrupt header: {c} {n}-grams")
    if counts[0] < 1:
        raise KenlmFormatError("corrupt header: empty vocabulary")
    if counts[0] >= 1 << 32:
        raise KenlmFormatError(f"corrupt header: {counts[0]} words do not fit 32-bit word ids")
    return Header(order, float(multiplier), model_type, bool(has_vocab), search_version, tuple(counts))


def pack_header(header):
    """The bytes of ``header`` as KenLM writes them (header_size(order) long)."""
    out = bytearray(header_size(header.order))
    out[:SANITY_SIZE] = SANITY
    FIXED.pack_into(out, SANITY_SIZE, header.order, header.probing_multiplier, header.model_type,
                    int(header.has_vocabulary), header.search_version)
    struct.pack_into(f"<{header.order}Q", out, SANITY_SIZE + FIXED.size, *header.counts)
    return bytes(out)


# --- sizes shared by the layouts --------------------------------------------------------

def required_bits(max_value):
    """Bits needed to store integers up to ``max_value`` (util::RequiredBits)."""
    return int(max_value).bit_length()


def _float32(x):
    """``x`` rounded to float32 (the product of two float32 values is exact in a
    double, so rounding it is float32 multiplication)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def probing_buckets(entries, multiplier):
    """Buckets of a util::ProbingHashTable for ``entries`` at ``multiplier``: KenLM
    multiplies in float32 and truncates."""
    scaled = int(_float32(_float32(multiplier) * _float32(entries)))
    return max(entries + 1, scaled)


# Entry sizes of the probing structures (bytes).
VOCAB_ENTRY = 12            # packed {uint64 hash, uint32 id}
PROB_BACKOFF = 8            # {float prob, float backoff}
REST_WEIGHTS = 12           # {float prob, float backoff, float rest}
MIDDLE_ENTRY = 16           # {uint64 key, float prob, float backoff}
REST_MIDDLE_ENTRY = 20      # packed {uint64 key, float prob, float backoff, float rest}
LONGEST_ENTRY = 12          # packed {uint64 key, float prob}
TRIE_UNIGRAM = 16           # {float prob, float backoff, uint64 next}
PROBING_VOCAB_HEADER = 8    # {uint32 version, uint32 bound}


class Table(_Record):
    """A region of the file: ``offset`` (absolute) and ``size`` in bytes; for hash
    tables ``buckets`` of ``entry`` bytes each."""
    __slots__ = ("offset", "size", "buckets", "entry")
    _defaults = (0, 0)

    @property
    def end(self):
        return self.offset + self.size


# --- probing ------------------------------------------------------------------------

class ProbingLayout(_Record):
    __slots__ = ("header", "vocab_header", "vocab", "unigram", "middle", "longest", "end")
    # vocab_header: ProbingVocabularyHeader {version, bound}
    # vocab: hash table of VOCAB_ENTRY
    # unigram: (counts[0] + 1) weights indexed by word id
    # middle: orders 2..N-1, hash tables keyed by n-gram hash
    # longest: order N
    # end: where the vocabulary strings begin

    @property
    def rest(self):
        return self.header.model_type == REST_PROBING


def probing_layout(header):
    """Where each table of a probing (or rest-cost probing) binary lies."""
    counts, mult = header.counts, header.probing_multiplier
    rest = header.model_type == REST_PROBING
    at = header.size
    vh = Table(at, PROBING_VOCAB_HEADER)
    at += align8(PROBING_VOCAB_HEADER)
    nb = probing_buckets(counts[0], mult)
    vocab = Table(at, nb * VOCAB_ENTRY, nb, VOCAB_ENTRY)
    at = vocab.end
    weights = REST_WEIGHTS if rest else PROB_BACKOFF
    uni = Table(at, (counts[0] + 1) * weights, counts[0] + 1, weights)
    at = uni.end
    middle = []
    entry = REST_MIDDLE_ENTRY if rest else MIDDLE_ENTRY
    for n in range(2, header.order):
        nb = probing_buckets(counts[n - 1], mult)
        middle.append(Table(at, nb * entry, nb, entry))
        at = middle[-1].end
    nb = probing_buckets(counts[-1], mult)
    longest = Table(at, nb * LONGEST_ENTRY, nb, LONGEST_ENTRY)
    return ProbingLayout(header, vh, vocab, uni, tuple(middle), longest, longest.end)


# --- trie ---------------------------------------------------------------------------

class Quantization(_Record):
    """SeparatelyQuantize: per middle order a table of 2**prob_bits probabilities
    and one of 2**backoff_bits back-offs (bins 0 and 1 of the back-offs are -0.0 and
    +0.0, "no extension" and "extension"), then the longest order's probabilities."""
    __slots__ = ("offset", "prob_bits", "backoff_bits", "middle", "longest", "size")
    # offset: of the 8-byte {version, prob_bits, backoff_bits} header
    # middle: (prob table offset, backoff table offset)
    # longest: longest order's prob table offset

    @property
    def middle_bits(self):
        return self.prob_bits + self.backoff_bits


def quant_size(order, prob_bits, backoff_bits):
    """SeparatelyQuantize::Size (DontQuantize: 0)."""
    longest = (1 << prob_bits) * 4
    middle = (1 << backoff_bits) * 4 + longest
    return (order - 2) * middle + longest + 8


def quant_layout(offset, order, prob_bits, backoff_bits):
    at = offset + 8
    middle = []
    for _ in range(order - 2):
        p = at
        at += (1 << prob_bits) * 4
        middle.append((p, at))
        at += (1 << backoff_bits) * 4
    return Quantization(offset, prob_bits, backoff_bits, tuple(middle), at,
                        quant_size(order, prob_bits, backoff_bits))


def chop_bits(max_offset, max_next, pointer_bits):
    """ArrayBhiksha's choice of how many high bits of the next pointers to move into
    the offset array (the one that saves the most bits, at most ``pointer_bits``)."""
    required = required_bits(max_next)
    best, lowest = 0, None
    for chop in range(0, min(required, pointer_bits) + 1):
        change = (max_next >> (required - chop)) * 64 - max_offset * chop
        if lowest is None or change < lowest:
            lowest, best = change, chop
    return best


def bhiksha_array_count(max_offset, max_next, pointer_bits):
    required = required_bits(max_next)
    return (max_next >> (required - chop_bits(max_offset, max_next, pointer_bits))) + 1


def bit_packed_size(entries, max_vocab, remaining_bits):
    """BitPacked::BaseSize: entries + 1 records (the last holds the end pointer),
    rounded up to bytes, plus 8 bytes so that 64-bit reads never leave the table."""
    total_bits = required_bits(max_vocab) + remaining_bits
    return ((1 + entries) * total_bits + 7) // 8 + 8


class BitPacked(_Record):
    """One order of the trie: ``entries`` records of ``total_bits`` bits from byte
    ``base``: the word id (``word_bits``), the quantised or raw values
    (``value_bits``), and (middle orders) the low ``next_bits`` bits of the index of
    the first child in the next order.  With array pointer compression the high bits
    of that index are found in ``array`` (``array_count`` sorted uint64 record
    indices: the first record whose pointer has each high-bits value)."""
    __slots__ = ("offset", "base", "entries", "word_bits", "value_bits", "next_bits", "size", "array", "array_count")
    _defaults = (None, 0)
    # offset: start of the section (the bhiksha header, if any)
    # base: start of the records

    @property
    def total_bits(self):
        return self.word_bits + self.value_bits + self.next_bits

    @property
    def end(self):
        return self.offset + self.size


class TrieLayout(_Record):
    __slots__ = ("header", "vocab", "quant", "unigram", "middle", "longest", "end", "pointer_bits")
    # vocab: uint64 count, then the sorted word hashes (ids 1..)
    # unigram: counts[0] + 2 records of TRIE_UNIGRAM
    # pointer_bits: build_binary -a (only meaningful with array pointers)


def sorted_vocab_size(entries):
    """SortedVocabulary::Size: a uint64 count, then one uint64 hash per word."""
    return 8 + 8 * entries


def trie_middle(offset, entries, max_vocab, max_next, value_bits, pointer_bits):
    """The BitPacked of a middle order at ``offset`` (pointer_bits None: no array
    compression)."""
    if pointer_bits is None:
        next_bits = required_bits(max_next)
        base, array, count, extra = offset, None, 0, 0
    else:
        count = bhiksha_array_count(entries + 1, max_next, pointer_bits)
        next_bits = required_bits(max_next) - chop_bits(entries + 1, max_next, pointer_bits)
        extra = 8 * (1 + count) + 7
        array = (offset + 7) // 8 * 8 + 8
        base = offset + extra
    size = extra + bit_packed_size(entries, max_vocab, value_bits + next_bits)
    return BitPacked(offset, base, entries, required_bits(max_vocab), value_bits, next_bits, size, array, count)


def trie_layout(header, prob_bits=0, backoff_bits=0, pointer_bits=0):
    """Where each section of a trie binary lies, given the quantisation bits and the
    array-compression bits that the file records at the start of its search section
    and of its first middle order (read them with read_trie_config)."""
    counts, order = header.counts, header.order
    at = header.size
    vocab = Table(at, sorted_vocab_size(counts[0]))
    at = vocab.end
    quant = None
    if header.quantized:
        quant = quant_layout(at, order, prob_bits, backoff_bits)
        at += quant.size
        middle_values, longest_values = prob_bits + backoff_bits, prob_bits
    else:
        middle_values, longest_values = 63, 31
    uni = Table(at, (counts[0] + 2) * TRIE_UNIGRAM, counts[0] + 2, TRIE_UNIGRAM)
    at = uni.end
    middle = []
    bits = pointer_bits if header.array_pointers else None
    for n in range(2, order):
        m = trie_middle(at, counts[n - 1], counts[0], counts[n], middle_values, bits)
        middle.append(m)
        at = m.end
    longest = BitPacked(at, at, counts[-1], required_bits(counts[0]), longest_values, 0,
                        bit_packed_size(counts[-1], counts[0], longest_values))
    return TrieLayout(header, vocab, quant, uni, tuple(middle), longest, longest.end, pointer_bits)


def search_offset(header):
    """Where the search section (after the vocabulary lookup) begins."""
    if header.is_trie:
        return header.size + sorted_vocab_size(header.counts[0])
    return header.size + align8(PROBING_VOCAB_HEADER) + probing_buckets(header.counts[0],
                                                                        header.probing_multiplier) * VOCAB_ENTRY


def read_trie_config(header, read):
    """(prob_bits, backoff_bits, pointer_bits) of a trie file; ``read(offset, n)``
    returns n bytes of the file at an absolute offset."""
    prob_bits = backoff_bits = pointer_bits = 0
    at = search_offset(header)
    if header.quantized:
        version, prob_bits, backoff_bits = read(at, 3)
        if version != QUANT_VERSION:
            raise KenlmFormatError(f"quantization version {version}; this reader reads {QUANT_VERSION}")
        for name, b in (("probability", prob_bits), ("back-off", backoff_bits)):
            if not 1 <= b <= 25:
                raise KenlmFormatError(f"corrupt quantization header: {b} {name} bits (KenLM allows 1..25)")
        at += quant_size(header.order, prob_bits, backoff_bits)
    if header.array_pointers and header.order > 2:
        at += (header.counts[0] + 2) * TRIE_UNIGRAM
        version, pointer_bits = read(at, 2)
        if version != BHIKSHA_VERSION:
            raise KenlmFormatError(f"array compression version {version}; this reader reads {BHIKSHA_VERSION}")
        # any byte is valid: build_binary -a 255 means "as many bits as save memory"
    return prob_bits, backoff_bits, pointer_bits


def layout(header, read):
    """The ProbingLayout or TrieLayout of a file with ``header``."""
    if not header.is_trie:
        return probing_layout(header)
    return trie_layout(header, *read_trie_config(header, read))


# --- hashing (for tools and tests; the kernels have their own) ------------------------

_M = 0xC6A4A7935BD1E995
_MASK = (1 << 64) - 1


def murmur_hash64a(data, seed=0):
    """MurmurHash64A of ``data`` (bytes): KenLM's vocabulary hash with seed 0."""
    n = len(data)
    h = (seed ^ (n * _M)) & _MASK
    end = n - n % 8
    for i in range(0, end, 8):
        k = int.from_bytes(data[i:i + 8], "little")
        k = (k * _M) & _MASK
        k ^= k >> 47
        k = (k * _M) & _MASK
        h ^= k
        h = (h * _M) & _MASK
    tail = data[end:]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * _M) & _MASK
    h ^= h >> 47
    h = (h * _M) & _MASK
    h ^= h >> 47
    return h


def word_hash(word):
    """KenLM's hash of a word (str as word_bytes encodes it, or bytes)."""
    # (nplm.io.text and its imports stay off the query program's path)
    return murmur_hash64a(importlib.import_module("nplm.io.text").word_bytes(word))


def combine_word_hash(current, word_id):
    """KenLM's probing n-gram key: extend ``current`` by one (older) word id."""
    return ((current * 8978948897894561157) ^ ((1 + word_id) * 17894857484156487943)) & _MASK
