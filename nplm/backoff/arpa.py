"""Reading and writing ARPA back-off language models.

``read_arpa(path)`` streams a (plain, gzip, bzip2 or xz) ARPA file into
``NGramTables``; ``write_arpa(tables, path)`` prints one in exactly lmplz's layout.

The format accepted is KenLM's (``lm/read_arpa.cc``): optional blank and ``#`` lines
before ``\\data\\``; ``ngram N=count`` lines numbered 1, 2, ...; ``\\N-grams:``
sections holding exactly ``count`` lines ``prob<TAB>w1 w2 ...[<TAB>backoff]``;
``\\end\\`` followed by nothing but blank lines.  Words are separated by tabs or
spaces, a missing back-off is 0, CRLF line ends are fine.  Words are bytes in any
encoding (nplm.io.text.word_str).

The Python layer here handles the header and section lines and words every error
message (file:line); the n-gram lines themselves are parsed by ``nplm._arpa``
without the GIL (in two threads for big buffers when a core is idle) while
another thread reads and decompresses the next chunk.  Memory grows with the
data, never with what a header claims: counts are checked against a plain
file's size before anything is allocated, and compressed input grows its arrays
as entries arrive.

Floats are read correctly rounded to float32 (an exact double fast path with a
check for the one case where rounding through double could differ, glibc's
``strtof_l`` otherwise), and written as the shortest decimal that reads back
as the same float32, laid out as lmplz (double-conversion) does: ``-0`` for
negative zero, exponent notation such as ``1e-7`` outside [1e-6, 1e21).
"""
import io
import lzma
import os
import queue
import re
import stat
import threading
import warnings
import zlib

import numpy as np

from nplm.backoff.tables import NGramTables
from nplm.errors import CompressedDataError, FormatError, quoted
from nplm.io import container
from nplm.io.atomic import text_output
from nplm.io.files import decompressed, open_binary
from nplm.io.progress import tqdm
from nplm.io.resources import ThreadPool, start_thread
from nplm.io.text import word_bytes, word_str

try:
    from nplm.backoff import _arpa
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "nplm._arpa is not built; run `python setup.py build_ext --inplace` "
        f"(or `pip install .`) first ({e})") from e

__all__ = ["read_arpa", "write_arpa"]

_C = _arpa.CODES
CHUNK = 4 << 20              # bytes read per step
MAX_LINE = 64 << 20          # a longer "line" is binary garbage, not ARPA
MAX_ORDER = 64
INITIAL_ROWS = 1 << 18       # first allocation when the header cannot be checked
SPLIT_BYTES = 1 << 20        # buffers at least this big may be parsed by two threads
SPLIT = None                 # two-thread parsing: None = when a core is idle, or True/False
# Comments before \data\ kept for the tables (the rest are skipped: a header of
# millions of comment lines once held 1.65 GB); blank lines (and, once these are
# full, comments) outside the sections are skipped by _arpa.skip_lines.
MAX_COMMENTS = 1000
MAX_COMMENT_BYTES = 1 << 20
_BLANKS_ALLOWED = frozenset(("prelude", "header", "end", "after_end"))
_COUNT_LINE = re.compile(rb"ngram ([0-9]+)=[ \t]*([0-9]+)[ \t]*")
KENLM_MAGIC = b"mmap lm http://kheafield.com/code"
NPLM_MAGIC = b"\x93NPLM\r\n\x1a"
NPLM_DAMAGED = ("this is a truncated or damaged nplm binary: it ends inside its 8-byte header "
                "magic, or the magic was altered (by a text-mode transfer?)")
KENLM_BINARY = ("this is a KenLM binary file, not an ARPA file: nplm.Model and the query commands read "
                "it as it is, and `nplm convert MODEL.binary MODEL.arpa` recovers its ARPA")


def _starts_with(path, prefix):
    try:
        with open(path, "rb") as f:
            return f.read(len(prefix)) == prefix
    except OSError:
        return False


def _show(raw, limit=60):
    """A byte string as readable text for an error message (errors.quoted)."""
    return quoted(raw, limit)


def _is_blank(line):
    return not line.strip()


# ---------------------------------------------------------------------------
# Reading


def _chunks(f, size):
    """Yield chunks of ``f`` read by a background thread, so that decompression
    (which releases the GIL) overlaps parsing."""
    q = queue.Queue(maxsize=3)
    stop = threading.Event()

    def work():
        try:
            while not stop.is_set():
                data = f.read(size)
                q.put(data)
                if not data:
                    return
        except BaseException as e:  # handed to the consumer
            q.put(e)

    t = threading.Thread(target=work, name="nplm-arpa-reader", daemon=True)
    start_thread(t)
    try:
        while True:
            item = q.get()
            if isinstance(item, BaseException):
                raise item
            if not item:
                return
            yield item
    finally:
        stop.set()
        while t.is_alive():  # unblock a put() waiting on a full queue
            try:
                q.get(timeout=0.05)
            except queue.Empty:
                pass
        t.join()


class _Reader:
    """The state machine over the parts of an ARPA file; n-gram lines go to the
    Cython parser, every other line comes here."""

    def __init__(self, path, plain_size, progress, on_read=None):
        self.path = path
        self.plain_size = plain_size    # bytes of a plain file (None if compressed)
        self.parser = _arpa.Parser()
        self.state = "prelude"
        self.counts = []
        self.count_at = []
        self.comments = []              # the first MAX_COMMENTS '#' lines before \data\
        self.comment_bytes = 0
        self.n = 0                       # order of the section being read / next one
        self.ids, self.prob, self.backoff, self.first_line = [], [], [], []
        self.vocab = None
        self.bar = None
        self.on_read = on_read
        self.pool = ThreadPool(max_workers=1, thread_name_prefix="nplm-arpa-parse")
        self.split = _idle_core() if SPLIT is None else SPLIT
        if progress:
            self.bar = tqdm(total=plain_size, unit="B", unit_scale=True, desc=os.path.basename(str(path)))

    def error(self, message, line=None):
        return FormatError(message, self.path, self.parser.line + 1 if line is None else line)

    # -- the header and section boundaries (Python, a handful of lines) --

    def header_line(self, line):  # noqa: C901 - one branch per kind of header line in the ARPA grammar
        """Handle one complete line (without its newline) outside n-gram data."""
        if line.endswith(b"\r"):
            line = line[:-1]
        if b"\0" in line and self.state != "prelude":
            raise self.error("NUL byte in the line (binary garbage?)")
        state = self.state
        if state == "prelude":
            if _is_blank(line):
                return
            if line.startswith(b"#"):
                if not self._comments_full():
                    self.comments.append(line[1:].decode("utf-8", "replace").removeprefix(" "))
                    self.comment_bytes += len(line)
                return
            if line == b"\\data\\":
                self.state = "counts"
                return
            raise self.error(self._not_arpa(line))
        if state == "counts":
            if _is_blank(line):
                if not self.counts:
                    raise self.error("no 'ngram N=count' lines after \\data\\")
                self._check_counts()
                self.state = "header"
                self.n = 1
                return
            m = _COUNT_LINE.fullmatch(line)
            if not m:
                raise self.error(f"expected a count line 'ngram N=count', got {_show(line)}")
            order, count = int(m.group(1)), int(m.group(2))
            if order != len(self.counts) + 1:
                raise self.error(f"ngram count lengths should be consecutive starting with 1: "
                                 f"expected ngram {len(self.counts) + 1}=..., got {_show(line)}")
            if order > MAX_ORDER:
                raise self.error(f"order {order} is beyond the supported maximum {MAX_ORDER}")
            if count >= 1 << 40:
                raise self.error(f"absurd n-gram count {count}")
            self.counts.append(count)
            self.count_at.append(self.parser.line + 1)
            return
        if state == "header":
            if _is_blank(line):
                return
            expected = b"\\%d-grams:" % self.n
            if line == expected:
                self._start_section()
                return
            if not line.startswith(b"\\") and self.n > 1:
                raise self.error(f"too many entries in the \\{self.n - 1}-grams: section: the header "
                                 f"says {self.counts[self.n - 2]}")
            raise self.error(f"expected n-gram header {expected.decode()} but got {_show(line)}")
        if state == "end":
            if _is_blank(line):
                return
            if line == b"\\end\\":
                self.state = "after_end"
                return
            if not line.startswith(b"\\"):
                raise self.error(f"too many entries in the \\{self.n - 1}-grams: section: the header "
                                 f"says {self.counts[-1]}")
            raise self.error(f"expected \\end\\ but got {_show(line)}")
        if state == "after_end":
            if not _is_blank(line):
                raise self.error(f"trailing garbage after \\end\\: {_show(line)}")
            return
        raise AssertionError(state)

    def _not_arpa(self, line):
        if line.startswith(b"\x1f\x8b"):
            return "looks like a gzip file inside a compressed file; decompress it first"
        if line.startswith(KENLM_MAGIC):
            if self.path != "-" and not _starts_with(self.path, KENLM_MAGIC):
                return ("this is a compressed KenLM binary file: decompress it (KenLM binaries are "
                        "memory-mapped as they are, then nplm.Model and the query commands read them)")
            return KENLM_BINARY
        if line.startswith(NPLM_MAGIC[:5]):
            # A whole nplm header means a good binary given where an ARPA file was
            # wanted; a partial one (nplm.Model found no container) a damaged file.
            if self.path != "-" and container.is_container(self.path):
                return ("this is an nplm binary model, not an ARPA file (`nplm convert` "
                        "writes it as ARPA)")
            return NPLM_DAMAGED
        if self.path != "-":
            try:
                with open(self.path, "rb") as f:      # the raw start: the line split at the magic's \n
                    if container.altered_magic(f.read(64)):
                        return container.ALTERED_MAGIC
            except OSError:
                pass
        if line.startswith(b"blmt"):
            return "this looks like an IRSTLM binary file; run compile-lm --text yes first"
        if line == b"iARPA":
            return "this is an IRSTLM iARPA file; convert it with compile-lm --text yes first"
        if b"\0" in line or not _valid_utf8(line):
            return "binary garbage where \\data\\ was expected: this is not an nplm binary or ARPA file"
        return f"first non-empty line was {_show(line)}, not \\data\\"

    def _check_counts(self):
        if self.counts[0] == 0:
            raise self.error("the header announces no unigrams", line=self.parser.line)
        if self.plain_size is not None:
            # Each n-gram line needs at least "p\tw1 ... wn\n": 2n + 2 bytes.
            least = [c * (2 * k + 4) for k, c in enumerate(self.counts)]
            if sum(least) > self.plain_size:
                k = int(np.argmax(least))
                raise self.error(
                    f"the header announces {self.counts[k]} {k + 1}-grams ({sum(self.counts)} n-grams "
                    f"in all), more than a {self.plain_size}-byte file can hold", line=self.count_at[k])

    def _start_section(self):
        n = self.n
        count = self.counts[n - 1]
        self.parser.start_section(n, n == len(self.counts), count)
        rows = count if self.plain_size is not None else min(count, INITIAL_ROWS)
        self._arrays(rows)
        self.state = "section"

    def _arrays(self, rows):
        """(Re)allocate the current section's arrays with ``rows`` rows, keeping
        what was parsed."""
        n, got = self.n, self.parser.got
        try:
            ids = np.empty((rows, n), dtype=np.int32)
            prob = np.empty(rows, dtype=np.float32)
            backoff = np.empty(rows, dtype=np.float32)
        except MemoryError:
            raise MemoryError(f"{self.path}:{self.parser.line + 1}: not enough memory for {rows:,} "
                              f"{n}-grams of the {sum(self.counts):,} the header announces") from None
        if got:
            ids[:got] = self._cur[0][:got]
            prob[:got] = self._cur[1][:got]
            backoff[:got] = self._cur[2][:got]
        self._cur = (ids, prob, backoff)
        self.parser.set_arrays(ids, prob, backoff)

    def _end_section(self):
        n = self.n
        ids, prob, backoff = self._cur
        self._cur = None
        got = self.parser.got
        if got < len(prob):
            ids, prob, backoff = ids[:got].copy(), prob[:got].copy(), backoff[:got].copy()
        self.ids.append(ids)
        self.prob.append(prob)
        self.backoff.append(backoff)
        self.first_line.append(self.parser.first_line or self.parser.line + 1)
        if n == 1:
            self._finish_vocab()
            self.ids[0] = np.arange(len(self.vocab), dtype=np.int32)[:, None]
        self.n = n + 1
        self.state = "header" if self.n <= len(self.counts) else "end"
        if self.on_read is not None:
            self.on_read(self.tables(self.path), tuple(self.counts))

    def _finish_vocab(self):
        self.vocab = word_str(self.parser.vocab_bytes()).split("\n")
        again, line = self.parser.duplicates
        if again:
            warnings.warn(f"{self.path}:{line}: {again} unigram{'s' if again > 1 else ''} listed again (the first: "
                          f"{self.vocab[line - self.first_line[0]]!r}); as in KenLM, the first entry "
                          "of a word is the one used", stacklevel=2)
        unks = [i for i, w in enumerate(self.vocab) if w in ("<unk>", "<UNK>")]
        if len(unks) > 1:
            warnings.warn(f"{self.path}:{self.first_line[0] + unks[1]}: the unigrams list <unk> "
                          f"{len(unks)} times (<unk> and <UNK> are one word to KenLM); as in KenLM, "
                          "the last entry is the one used", stacklevel=2)
        self.parser.set_unk(unks[0] if unks else -1)

    # -- the n-gram data (Cython) --

    def feed(self, data, end):
        """Consume the complete lines data[:end]."""
        pos = 0
        while pos < end:
            if self.state == "section":
                code, pos = self._run(data, pos, end)
                if code == _C["DONE"]:
                    self._end_section()
                elif code == _C["NEED_SPACE"]:
                    self._arrays(min(self.counts[self.n - 1], max(2 * self.parser.cap, 1024)))
                elif code == _C["BACKSLASH"]:
                    raise self.error(self._too_few())
                elif code >= _C["ERR_FIRST"]:
                    raise self._kernel_error(code, data)
                continue
            if self.state in _BLANKS_ALLOWED:
                pos, lines = _arpa.skip_lines(data, pos, end, self.state == "prelude" and self._comments_full())
                self.parser.line += lines
                if pos == end:
                    break
            nl = data.find(b"\n", pos, end)
            self.header_line(data[pos:nl])
            self.parser.line += 1
            pos = nl + 1
        self._rows_so_far()

    def _comments_full(self):
        return len(self.comments) >= MAX_COMMENTS or self.comment_bytes >= MAX_COMMENT_BYTES

    def _run(self, data, pos, end):
        """Parse n-gram lines: in two threads when the buffer is big and its first
        half lies inside one section of order >= 2 (the vocabulary is complete
        then), else in one.  The second half may end the section (DONE), run
        out of rows (NEED_SPACE) or fail like a single run."""
        if self.split and self.n > 1 and end - pos >= SPLIT_BYTES:
            got, need = self.parser.got, self.counts[self.n - 1]
            mid = data.find(b"\n", pos + (end - pos) // 2, end) + 1
            lines_a, entries_a = _arpa.count_lines(data, pos, mid) if pos < mid < end else (0, 0)
            if 0 < lines_a and entries_a < need - got:
                rows = got + entries_a + (end - mid) // 4 + 1  # room for the second half, roughly
                if self.parser.cap < rows:
                    self._arrays(min(need, max(2 * self.parser.cap, rows)))
                if self.parser.cap > got + entries_a:
                    self.parser.split_begin(data, pos, mid, end, lines_a, entries_a)
                    second = self.pool.submit(self.parser.split_part, data, 1)
                    try:
                        self.parser.split_part(data, 0)
                    finally:
                        second.result()
                    return self.parser.split_end()
        return self.parser.run(data, pos, end)

    def _too_few(self):
        return (f"the \\{self.n}-grams: section ends after {self.parser.got} entries but the "
                f"header says {self.counts[self.n - 1]}")

    def _kernel_error(self, code, data):  # noqa: C901 - one message per error code of the parsing kernel
        line_no, start, tok, tok_end, other = self.parser.error
        line = data[start:data.find(b"\n", start)]
        token = data[tok:tok_end]
        shown = _show(token)
        n = self.n
        where = f"in the {n}-gram"
        if b"\0" in line:
            message = f"NUL byte {where} (binary garbage?)"
        elif code in (_C["ERR_FLOAT"], _C["ERR_NONFINITE"]):
            if code == _C["ERR_NONFINITE"] or token.lower().lstrip(b"+-") in (b"nan", b"inf", b"infinity"):
                message = f"{shown} is not a finite number ({where})"
            elif not token:
                message = f"a number is missing {where}"
            else:
                message = f"bad number {shown} {where}"
        elif code == _C["ERR_POSITIVE"]:
            message = (f"positive log10 probability {shown} {where}; this is a bug in IRSTLM "
                       "(KenLM rejects it too unless told to map it to 0)")
        elif code == _C["ERR_TAB"]:
            message = f"expected a tab after the probability {where}"
        elif code == _C["ERR_FEW_WORDS"]:
            message = f"too few words: expected {n} {where} section"
        elif code == _C["ERR_AFTER_WORDS"]:
            message = (f"expected a tab and a back-off or the end of the line after {n} word(s), "
                       f"got {shown} (too many words?) {where}")
        elif code == _C["ERR_AFTER_BACKOFF"]:
            message = f"unexpected {shown} after the back-off {where}"
        elif code == _C["ERR_HIGHEST_BACKOFF"]:
            message = (f"non-zero back-off {shown} for an n-gram of the highest order "
                       f"({n}), which cannot have one")
        elif code == _C["ERR_UNKNOWN_WORD"]:
            if token in (b"<unk>", b"<UNK>"):
                message = f"{shown} appears {where} but the unigrams have no <unk>"
            else:
                message = (f"word {shown} was not seen in the unigrams (which are supposed to list "
                           f"the entire vocabulary) but appears {where}")
        elif code == _C["ERR_MEMORY"]:
            raise MemoryError(f"{self.path}:{line_no}: cannot allocate {other} bytes")
        else:  # pragma: no cover
            message = f"parse error {code}"
        return FormatError(message, self.path, line_no)

    def finish(self):
        """At end of file: everything must have been seen."""
        line = self.parser.line + 1
        if self.state == "after_end":
            return
        if self.state == "prelude":
            raise FormatError("empty file: no \\data\\ header" if not self.comments else
                              "no \\data\\ header before the end of the file", self.path, line)
        if self.state == "section":
            raise FormatError(f"truncated file: it ends inside the \\{self.n}-grams: section after "
                              f"{self.parser.got} of {self.counts[self.n - 1]} entries", self.path, line)
        if self.state in ("counts", "header"):
            raise FormatError("truncated file: it ends before the \\%d-grams: section" % max(self.n, 1),
                              self.path, line)
        raise FormatError("truncated file: missing \\end\\", self.path, line)

    def tables(self, source):
        """The sections read so far."""
        return NGramTables(vocab=self.vocab, ids=list(self.ids), logprob=list(self.prob),
                           backoff=list(self.backoff), comments=list(self.comments), source=source,
                           first_line=list(self.first_line))

    def _rows_so_far(self):
        """on_read of the section being read (order 2 or more): its rows so far."""
        got = self.parser.got
        if self.on_read is None or self.state != "section" or self.n < 2 or got == 0:
            return
        ids, prob, backoff = self._cur
        tables = self.tables(self.path)
        tables.ids.append(ids[:got])
        tables.logprob.append(prob[:got])
        tables.backoff.append(backoff[:got])
        tables.first_line.append(self.parser.first_line)
        self.on_read(tables, tuple(self.counts))


def _idle_core():
    """Is a second core free?  Splitting costs ~20% more CPU in all, so on a
    busy machine it slows the read down instead."""
    try:
        cores = len(os.sched_getaffinity(0))
        return cores >= 2 and os.getloadavg()[0] <= cores - 1
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) >= 2


def _valid_utf8(raw):
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _plain_size(f, source):  # noqa: C901 - the ARPA grammar's section loop, with its errors in place
    """The size of the uncompressed regular file ``f`` reads (None for a compressed
    file, a pipe or stdin, whose arrays grow as the entries arrive instead)."""
    if source == "-" or not isinstance(f, io.BufferedReader):
        return None
    try:
        st = os.fstat(f.fileno())
    except (OSError, io.UnsupportedOperation):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def read_arpa(path, progress=False, stream=None, on_read=None):
    """Read an ARPA file (plain, .gz, .bz2 or .xz; '-' is stdin) into NGramTables.
    ``stream``: ``path`` already open (nplm.io.files.sniff's stream, at its start),
    read instead of opening ``path`` again, which a pipe would not survive.
    ``on_read(tables, counts)`` is called as the file is read, with the NGramTables
    read so far and the header's counts: once each section is complete, and as the
    lines of a section of order 2 or more come in, with its rows so far (a consumer
    may work on them while the rest is read; the arrays of completed rows do not
    change).

    Raises FormatError naming the file and line for anything KenLM would reject
    (and for NaN/inf values, which it does not check), OSError
    when the file cannot be read."""
    source = "-" if path in (None, "-") else os.fspath(path)
    f = open_binary(source) if stream is None else decompressed(stream, source)
    try:
        plain_size = _plain_size(f, source)
        reader = _Reader(source, plain_size, progress, on_read)
        carry = b""
        try:
            for chunk in _chunks(f, CHUNK):
                if reader.bar is not None:
                    reader.bar.update(len(chunk))
                data = carry + chunk if carry else chunk
                end = data.rfind(b"\n") + 1
                if end == 0:
                    if len(data) > MAX_LINE:
                        raise FormatError(f"a line longer than {MAX_LINE} bytes: this is not "
                                          "an ARPA file", source, reader.parser.line + 1)
                    carry = data
                    continue
                reader.feed(data, end)
                carry = data[end:]
            if carry:  # a last line without newline
                try:
                    reader.feed(carry + b"\n", len(carry) + 1)
                except FormatError as e:
                    # (before \data\ the file is no ARPA at all: not a truncation)
                    if e.line == reader.parser.line + 1 and reader.state != "prelude":
                        message = str(e).removeprefix(f"{source}:{e.line}: ")
                        raise FormatError(message + " (the file ends inside this line: "
                                          "truncated?)", source, e.line) from None
                    raise
        except CompressedDataError:
            raise  # names the file already; the parser's line lags the decompressor
        except (EOFError, lzma.LZMAError, zlib.error, OSError) as e:
            if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError)):
                raise
            raise FormatError(f"corrupt or truncated compressed data ({e})", source) from e
        finally:
            reader.pool.shutdown()
            if reader.bar is not None:
                reader.bar.close()
        reader.finish()
        return reader.tables(source)
    finally:
        f.close()


# ---------------------------------------------------------------------------
# Writing


ROWS_PER_JOB = 1 << 16


def _vocab_bytes(vocab):
    encoded = [word_bytes(w) for w in vocab]
    lengths = np.fromiter((len(w) for w in encoded), dtype=np.int64, count=len(encoded))
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    words = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    if len(words) == 0:
        words = np.zeros(1, dtype=np.uint8)
    bad = _arpa.check_words(words[:offsets[-1]])
    if bad >= 0 or (lengths == 0).any():
        index = int(np.searchsorted(offsets, bad, side="right") - 1) if bad >= 0 else int(np.argmin(lengths))
        raise ValueError(f"vocabulary word {index} ({vocab[index]!r}) is empty or holds white space "
                         "or NUL, which ARPA cannot represent")
    if len(set(vocab)) != len(vocab):
        raise ValueError("the vocabulary has duplicate words")
    return words, offsets


def _check_tables(tables):
    tables.validate()
    for k in range(tables.order):
        for name, arr in (("logprob", tables.logprob[k]), ("backoff", tables.backoff[k])):
            # a log10 probability may be -inf (written "-inf", which KenLM reads)
            ok = np.isfinite(arr) | (arr == -np.inf) if name == "logprob" else np.isfinite(arr)
            if not ok.all():
                i = int(np.flatnonzero(~ok)[0])
                raise ValueError(f"{name}[{k}][{i}] = {arr[i]} is not finite; ARPA cannot hold it")
    if tables.order and np.any(tables.backoff[-1] != 0):
        raise ValueError("the highest order has non-zero back-offs, which ARPA cannot hold")


def _format_job(args):
    """ARPA text of rows start..stop-1 of one order (runs in a worker thread;
    the kernel releases the GIL)."""
    ids, prob, backoff, with_backoff, start, stop, words, offsets = args
    longest = int(np.diff(offsets).max()) if len(offsets) > 1 else 0
    out = bytearray((stop - start) * (ids.shape[1] * 12 + 40) + 1024)
    used, row = 0, start
    while row < stop:
        if len(out) - used < 2 * 32 + ids.shape[1] * (longest + 1):  # room for any one line
            out.extend(bytes(len(out) + ids.shape[1] * (longest + 1)))
        view = memoryview(out)[used:]
        written, row, bad = _arpa.format_rows(view, ids, prob, backoff, with_backoff, row, stop, words, offsets)
        view.release()
        if bad >= 0:
            raise ValueError(f"ids[{ids.shape[1] - 1}] row {bad} holds a word id outside the vocabulary")
        used += written
    del out[used:]
    return out


def _write_stream(tables, out, progress):
    def blocks(k):
        yield tables.ids[k], tables.logprob[k], tables.backoff[k]
    write_sections(out, tables.vocab, tables.counts, tables.comments, blocks, progress)


def write_sections(out, vocab, counts, comments, blocks, progress=False):
    """Write an ARPA file to the binary stream ``out`` from its parts: the header's
    ``counts`` per order, and ``blocks(k)`` yielding order k+1's rows in file order
    as (ids, log10 prob, log10 back-off) arrays, one block or many (a model that
    is never whole in memory).  ``write_arpa`` formats through here."""
    words, offsets = _vocab_bytes(vocab)
    head = []
    for c in comments or ():
        for part in str(c).split("\n"):
            head.append(f"# {part}\n" if part else "#\n")
    head.append("\\data\\\n")
    for k, c in enumerate(counts):
        head.append(f"ngram {k + 1}={c}\n")
    out.write("".join(head).encode("utf-8"))
    bar = None
    if progress:
        bar = tqdm(total=sum(counts), unit="ngram", unit_scale=True, desc="write ARPA")
    order = len(counts)
    with ThreadPool(max_workers=2) as pool:
        for k in range(order):
            out.write(b"\n\\%d-grams:\n" % (k + 1))
            written = 0
            for ids, prob, backoff in blocks(k):
                ids = np.ascontiguousarray(ids, dtype=np.int32)
                prob = np.ascontiguousarray(prob, dtype=np.float32)
                backoff = np.ascontiguousarray(backoff, dtype=np.float32)
                count = len(prob)
                jobs = [(ids, prob, backoff, k + 1 < order, a, min(a + ROWS_PER_JOB, count), words, offsets)
                        for a in range(0, count, ROWS_PER_JOB)]
                # map() keeps the order; at most a few jobs run ahead of the writes.
                for i, text in enumerate(_bounded_map(pool, _format_job, jobs, ahead=4)):
                    out.write(text)
                    if bar is not None:
                        bar.update(jobs[i][5] - jobs[i][4])
                written += count
            if written != counts[k]:
                raise ValueError(f"order {k + 1}: the header says {counts[k]} n-grams, "
                                 f"{written} were written")
    out.write(b"\n\\end\\\n")
    if bar is not None:
        bar.close()


def _bounded_map(pool, fn, items, ahead):
    """pool.map that submits at most ``ahead`` items beyond the one being consumed."""
    futures = []
    items = iter(items)
    for item in items:
        futures.append(pool.submit(fn, item))
        if len(futures) > ahead:
            yield futures.pop(0).result()
    for fut in futures:
        yield fut.result()


def write_arpa(tables, path_or_binary_file, progress=False):
    """Write ``tables`` as an ARPA file in lmplz's layout.

    A path is written atomically and compressed by its extension (.gz, .bz2,
    .xz), '-' is stdout; a binary file object is written as is.  Floats are printed as the
    shortest decimal that reads back as the same float32, so
    ``read_arpa(write_arpa(t))`` reproduces ``t`` bit for bit."""
    _check_tables(tables)
    target = path_or_binary_file
    if hasattr(target, "write"):
        _write_stream(tables, target, progress)
        return
    with text_output(target) as f:      # ('-' is stdout)
        _write_stream(tables, f, progress)
