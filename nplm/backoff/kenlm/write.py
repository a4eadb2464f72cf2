"""Writing KenLM's binary model files from NGramTables: ``write_binary(tables, path,
Options(...))`` with build_binary's settings, or from an ARPA file
(``build_binary_from_arpa``).  The probing layout is built here, the trie in
``trie.py``; both come out byte-identical to KenLM's build_binary
(docs/kenlm-build-binary.md lists the rules followed).
"""
import errno
import sys

import numpy as np

from nplm import _kernels
from nplm.backoff import binary as nplm_binary
from nplm.backoff.arpa import read_arpa
from nplm.backoff.kenlm import _write, trie
from nplm.backoff.kenlm import format as kformat
from nplm.backoff.kenlm.format import PROBING_VOCAB_VERSION, SEARCH_VERSION, Header, pack_header, probing_layout
from nplm.backoff.kenlm.prepare import Vocab, check_probs, kenlm_backoffs, strings, where
from nplm.errors import FormatError
from nplm.io.atomic import atomic_write
from nplm.io.resources import ThreadPool, arpa_header_counts, check_available

PROBING, TRIE = "probing", "trie"
DEFAULT_MULTIPLIER = 1.5              # build_binary's -p
DEFAULT_UNKNOWN_LOGPROB = -100.0      # build_binary's -u


class Options:
    """build_binary's settings: type, -p multiplier, -q prob_bits, -b backoff_bits,
    -a pointer_bits, -v include_vocab=False, -u unknown_logprob, -s
    allow_missing_markers=True.  Checked as build_binary checks them."""

    def __init__(self, type=PROBING, multiplier=DEFAULT_MULTIPLIER, prob_bits=None,
                 backoff_bits=None, pointer_bits=None, include_vocab=True,
                 unknown_logprob=DEFAULT_UNKNOWN_LOGPROB, allow_missing_markers=False):
        if type not in (PROBING, TRIE):
            raise ValueError(f"the KenLM binary type is 'probing' or 'trie', not {type!r}")
        multiplier = float(np.float32(multiplier))
        if not (np.isfinite(multiplier) and multiplier > 1.0):
            raise ValueError(f"the probing multiplier (-p) must be > 1.0, not {multiplier!r}")
        if backoff_bits is not None and prob_bits is None:
            raise ValueError("back-off quantisation (-b) needs probability quantisation (-q)")
        if prob_bits is not None:
            if type != TRIE:
                raise ValueError("quantisation (-q/-b) is only implemented in the trie data structure")
            backoff_bits = prob_bits if backoff_bits is None else backoff_bits
            for flag, bits in (("-q", prob_bits), ("-b", backoff_bits)):
                if not 1 <= int(bits) <= 25:
                    raise ValueError(f"{flag}: quantisation takes 1 to 25 bits, not {bits}")
        if pointer_bits is not None and not 0 <= int(pointer_bits) <= 255:
            raise ValueError(f"-a: the pointer compression bits are 0 to 255, not {pointer_bits}")
        self.type = type
        self.multiplier = multiplier
        self.prob_bits = None if prob_bits is None else int(prob_bits)
        self.backoff_bits = None if backoff_bits is None else int(backoff_bits)
        self.pointer_bits = None if pointer_bits is None or type != TRIE else int(pointer_bits)
        self.include_vocab = bool(include_vocab)
        self.unknown_logprob = float(unknown_logprob)
        self.allow_missing_markers = bool(allow_missing_markers)

    @property
    def model_type(self):
        """The header's model type number (lm/model_type.hh)."""
        if self.type == PROBING:
            return kformat.PROBING
        return kformat.TRIE + (1 if self.prob_bits is not None else 0) + (2 if self.pointer_bits is not None else 0)


def write_binary(tables, path, opts=None, messages=sys.stderr):
    """Write ``tables`` (NGramTables) as a KenLM binary at ``path`` (atomically)."""
    opts = opts or Options()
    tables.validate()
    if tables.order < 2:
        raise FormatError("KenLM's binary formats need at least a bigram model", tables.source)
    check_order(tables.order, tables.source)
    check_probs(tables)
    if opts.type == PROBING:
        builder = ProbingBuilder(tables, tables.counts, opts, messages)
        for n in range(2, tables.order + 1):
            builder.add(tables, n)
        parts = builder.parts()
    else:
        parts = trie.build(tables, Vocab(tables, opts, messages), opts)
    _write_parts(path, parts)


def _write_parts(path, parts):
    with atomic_write(path) as f:
        for part in parts:
            f.write(part)


def check_probing_memory(counts, opts):
    """Refuse, before any work, probing tables of ``counts`` n-grams that cannot fit in
    memory (a huge -p): a clear error instead of a failed allocation or swapping."""
    header = Header(len(counts), opts.multiplier, opts.model_type, opts.include_vocab, 0,
                    tuple(int(c) for c in counts))
    what = f"the KenLM probing file ({sum(counts):,} n-grams, -p {opts.multiplier:g})"
    try:
        with np.errstate(over="ignore"):
            needed = probing_layout(header).end
    except OverflowError:                   # multiplier x count is infinite in float32
        needed = 2 ** 64
    if needed >= 2 ** 60:
        raise OSError(errno.ENOMEM, f"{what} would need about {needed / 2 ** 40:.3g} TiB; use a smaller -p")
    check_available(needed, what, "use the trie type or a smaller -p")


class ProbingBuilder:
    """KenLM's probing file, built in the ARPA's order, as KenLM's build_binary builds
    it while it reads the ARPA: an order's n-grams need only the orders below them.
    ``tables`` holds the model's unigrams at least (and names the source),
    ``counts`` every order's count; ``add(tables, n)`` inserts the n-grams of order n
    (2, 3, ... in turn) that ``tables`` holds beyond those inserted before: a whole
    order, or its next rows as they are read."""

    def __init__(self, tables, counts, opts, messages):
        self.order, self.counts, self.opts = len(counts), tuple(int(c) for c in counts), opts
        self.vocab = Vocab(tables, opts, messages)
        self.words = self.vocab.number_in_arpa_order()
        # with <unk> first (as lmplz writes it) the ARPA's word indices are the file's ids
        self.same_ids = bool(np.array_equal(self.vocab.ids, np.arange(len(self.vocab.ids))))
        header = Header(self.order, opts.multiplier, opts.model_type, opts.include_vocab,
                        SEARCH_VERSION[opts.model_type], self.counts)
        check_probing_memory(self.counts, opts)
        layout = probing_layout(header)
        self.body = body = np.zeros(layout.end, dtype=np.uint8)
        body[:header.size] = np.frombuffer(pack_header(header), np.uint8)
        vh = layout.vocab_header.offset
        body[vh:vh + 8].view(np.uint32)[:] = (PROBING_VOCAB_VERSION, len(self.words) + 1)   # version, bound
        if not _write.fill_vocab_table(body[layout.vocab.offset:layout.vocab.end], self.vocab.hashes,
                                       layout.vocab.buckets):
            raise FormatError("the vocabulary does not fit its probing table", tables.source)
        self.uni = body[layout.unigram.offset:layout.unigram.end].view(np.float32).reshape(-1, 2)
        self.uni[self.vocab.ids, 0] = tables.logprob[0]
        self.uni[self.vocab.ids, 1] = kenlm_backoffs(tables.backoff[0])
        self.search = body[layout.unigram.offset:]
        ngram_tables = layout.middle + (layout.longest,)
        self.offsets = np.array([t.offset - layout.unigram.offset for t in ngram_tables], dtype=np.uint64)
        self.buckets = np.array([t.buckets for t in ngram_tables], dtype=np.uint64)
        self.used = np.zeros(self.order - 1, dtype=np.uint64)
        self.done = [len(self.vocab.ids)] + [0] * (self.order - 1)      # n-grams inserted, by order

    def add(self, tables, n):
        start, stop = self.done[n - 1], len(tables.logprob[n - 1])
        if stop <= start:
            return
        ids = np.ascontiguousarray(tables.ids[n - 1][start:stop])
        ids = ids.view(np.uint32) if self.same_ids else self.vocab.ids[ids]
        # (the kernel reads a zero back-off as -0.0, as kenlm_backoffs does)
        backoff = (np.ascontiguousarray(tables.backoff[n - 1][start:stop]) if n < self.order
                   else np.zeros(0, np.float32))
        code, index = _write.probing_order(n, self.order, ids, np.ascontiguousarray(tables.logprob[n - 1][start:stop]),
                                           backoff, self.uni, self.search, self.offsets, self.buckets, self.used)
        self.done[n - 1] = stop
        index += start
        if code == _write.NO_CONTEXT:
            path, line = where(tables, n, index)
            raise FormatError(f"the context of every {n}-gram should appear as a {n - 1}-gram",
                              path, line)
        if code == _write.FULL:
            path, line = where(tables, n, index)
            raise FormatError("a probing table is full: too many n-grams lack their suffixes "
                              "(KenLM gives up here too); raise the multiplier (-p)", path, line)

    def parts(self):
        """The file's parts: header, vocabulary table and search in one array, then the
        strings."""
        if not self.vocab.saw_unk:
            self.uni[0] = (self.opts.unknown_logprob, 0.0)
        return [self.body, strings(self.words)] if self.opts.include_vocab else [self.body]


class _StreamedProbing:
    """ProbingBuilder fed by read_arpa's on_read, in a worker thread: n-grams are
    inserted while the lines after them are read.  The first error stops it and
    waits for the end of the read (whose own error, coming first in the file, wins).
    (The parser refuses positive log probabilities itself: no check_probs.)"""

    def __init__(self, opts, messages):
        self.opts, self.messages = opts, messages
        self.pool = ThreadPool(max_workers=1, thread_name_prefix="nplm-kenlm-probing")
        self.jobs, self.failed, self.builder = [], False, None

    def read(self, tables, counts):
        self.jobs.append(self.pool.submit(self._add, tables, counts))

    def _add(self, tables, counts):
        if self.failed:
            return
        try:
            if self.builder is None:           # the unigrams, complete
                if len(counts) < 2:
                    raise FormatError("KenLM's binary formats need at least a bigram model", tables.source)
                self.builder = ProbingBuilder(tables, counts, self.opts, self.messages)
            for n in range(2, tables.order + 1):
                self.builder.add(tables, n)
        except BaseException:
            self.failed = True
            raise

    def parts(self):
        """After a read that succeeded: the file's parts, or the first error."""
        for job in self.jobs:
            job.result()
        return self.builder.parts()


def check_order(order, source):
    """Refuse, before writing, a KenLM binary that nothing could load: nplm reads KenLM
    files up to order QUERY_MAX_ORDER; KenLM's own programs and the kenlm module as pip
    builds it, up to 6 (KENLM_MAX_ORDER at their compile time)."""
    if order > _kernels.QUERY_MAX_ORDER:
        raise FormatError(f"order {order}: a KenLM binary file of this order could not be loaded (nplm reads "
                          f"KenLM files up to order {_kernels.QUERY_MAX_ORDER}, KenLM as pip builds it up to 6); "
                          "keep the ARPA file", source)


def build_binary_from_arpa(arpa_path, out, type=None, *, progress=False, messages=sys.stderr, **options):
    """read_arpa(arpa_path) then build_binary(tables, out, type, **options), but
    KenLM's probing file is built while the ARPA is read: the n-grams are inserted
    (in one thread and in the file's order, which fixes the layout) as the lines
    after them are parsed.  Returns the type written."""
    kind = resolve_type(type, out)
    opts = check_options(kind, **options)
    counts = arpa_header_counts(arpa_path)
    if opts is not None and counts:
        check_order(len(counts), arpa_path)
    if opts is None or opts.type != PROBING:
        return build_binary(read_arpa(arpa_path, progress=progress), out, kind, messages=messages, **options)
    _write_parts(out, _streamed_probing_parts(arpa_path, opts, progress, messages))
    return kind


def probing_from_arpa(arpa_path, messages=sys.stderr):
    """KenLM's probing file of ``arpa_path`` without its list of words (build_binary -v),
    built in memory as KenLM's query builds its model of an ARPA file: a uint8 array."""
    (body,) = _streamed_probing_parts(arpa_path, check_options(PROBING, include_vocab=False), False, messages)
    return body


def _streamed_probing_parts(arpa_path, opts, progress, messages):
    streamed = _StreamedProbing(opts, messages)
    try:
        read_arpa(arpa_path, progress=progress, on_read=streamed.read)
        return streamed.parts()
    finally:
        streamed.pool.shutdown(cancel_futures=True)


NPLM = "nplm"
TYPES = (PROBING, TRIE, NPLM)


def resolve_type(type, out):
    """The format to write: ``type`` when given, else nplm's own for an output named
    ``*.nplm`` and KenLM's probing (build_binary's default) for any other name."""
    if type is None:
        return NPLM if str(out).endswith(".nplm") else PROBING
    if type not in TYPES:
        raise ValueError(f"the binary type is one of {', '.join(TYPES)}, not {type!r}")
    return type


def check_options(kind, multiplier=None, prob_bits=None, backoff_bits=None, pointer_bits=None,
                  include_vocab=True, unknown_logprob=DEFAULT_UNKNOWN_LOGPROB,
                  allow_missing_markers=False):
    """The Options for writing ``kind`` (None for nplm's format, whose multiplier its
    own builder checks); ValueError for settings that do not apply or are out of range."""
    if kind == NPLM:
        kenlm_only = {"-q": prob_bits, "-b": backoff_bits, "-a": pointer_bits,
                      "-v": None if include_vocab else True,
                      "-u": None if unknown_logprob == DEFAULT_UNKNOWN_LOGPROB else unknown_logprob,
                      "-s": True if allow_missing_markers else None}
        given = [flag for flag, value in kenlm_only.items() if value is not None]
        if given:
            raise ValueError(f"{'/'.join(given)} apply to KenLM's formats (probing, trie), not to "
                             "nplm's binary")
        return None
    return Options(kind, DEFAULT_MULTIPLIER if multiplier is None else multiplier, prob_bits,
                   backoff_bits, pointer_bits, include_vocab, unknown_logprob, allow_missing_markers)


def build_binary(tables, out, type=None, *, messages=sys.stderr, **options):
    """Write NGramTables as a binary model: KenLM's ``probing`` or ``trie`` file
    exactly as build_binary writes it with the same settings (the keywords of
    ``check_options``: multiplier=-p, prob_bits=-q, backoff_bits=-b,
    pointer_bits=-a, include_vocab=False for -v, unknown_logprob=-u,
    allow_missing_markers=True for -s), or nplm's own format (``nplm``).
    ``type=None`` picks by the output's name (see ``resolve_type``).  Returns the
    type written."""
    kind = resolve_type(type, out)
    opts = check_options(kind, **options)
    if opts is None:
        multiplier = options.get("multiplier")
        nplm_binary.build_binary(tables, out, nplm_binary.PROBING_MULTIPLIER if multiplier is None
                                 else multiplier)
    else:
        write_binary(tables, out, opts, messages)
    return kind
