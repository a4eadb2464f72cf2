"""Stage 1, counting: the vocabulary and the highest-order n-gram counts.

Text comes from files (plain, gzip, bz2 or xz), stdin ('-'), file objects, several
of them or glob patterns, read in chunks of whole lines.  The counts stay in memory
while they fit in the budget; beyond it the table is sorted in suffix order and
spilled to the temporary folder as a run, and counting starts a new table with the
same vocabulary (lmplz's corpus_count does the same with its blocks).
"""
import codecs
import contextlib
import errno
import glob
import gzip
import io
import lzma
import mmap
import os
import shutil
import sys
import zlib

import numpy as np

from nplm.backoff import _kn
from nplm.errors import CompressedDataError, FormatError
from nplm.io.files import open_binary
from nplm.io.text import word_str

MAX_CHUNK = 1 << 24
# Bytes a page fault on a mapped file may map around the page (Linux's fault-around).
FAULT_AROUND = 64 << 10
MIN_CHUNK = 1 << 16


class Counts:
    """What counting yields: the counter (vocabulary, token statistics, and the
    n-grams not spilled) and the names of the spilled runs in ``folder``."""

    def __init__(self, counter, name):
        self.counter = counter
        self.name = name
        self.runs = []          # names of (keys, counts) runs in the folder, in spill order
        self.folder = None
        self.maps = {}

    @property
    def spilled(self):
        return bool(self.runs)

    def spill(self, folder):
        """Sort the table in suffix order and write it out as a run."""
        keys, counts = self.counter.suffix_sorted()
        self.counter.reset_table()
        _kn.release_free_memory()
        run = f"run{len(self.runs)}"
        save_run(folder, run, keys, counts)
        self.runs.append(run)
        self.folder = folder
        del keys, counts
        _kn.release_free_memory()

    def load_run(self, run):
        """A run's (keys, counts), mapped once."""
        if run not in self.maps:
            self.maps[run] = (self.folder.load(run + ".keys"), self.folder.load(run + ".counts"))
        return self.maps[run]

    def run_rows(self, run, lo, hi):
        """Copies of rows [lo, hi) of a run's (keys, counts), whose pages are then
        dropped from the mapping: a part takes a short segment of each of many runs,
        and a fault on a mapped file maps the cached pages around it too (64 KiB of
        each run: resident memory many times -S with a thousand runs)."""
        out = []
        for a in self.load_run(run):
            out.append(np.array(a[lo:hi]))
            m = getattr(a, "_mmap", None)
            if m is None or hi <= lo or not hasattr(mmap, "MADV_DONTNEED"):
                continue
            row = a.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
            base = a.offset % mmap.ALLOCATIONGRANULARITY         # the array's start in the mapping
            start = max(0, base + lo * row - FAULT_AROUND) // mmap.PAGESIZE * mmap.PAGESIZE
            end = min(len(m), base + hi * row + FAULT_AROUND)
            with contextlib.suppress(OSError, ValueError):
                m.madvise(mmap.MADV_DONTNEED, start, end - start)
        return tuple(out)

    def run_histogram(self, run, vocab_size):
        """How many of a run's n-grams end in each word (V,) int64, as saved with it
        (or counted from the run, whose pages are then dropped)."""
        try:
            hist = self.folder.load(run + ".hist", mmap=False)
        except FileNotFoundError:
            hist = last_words(self.load_run(run)[0])
            self.release()
        out = np.zeros(vocab_size, dtype=np.int64)
        out[:len(hist)] = hist
        return out

    def release(self):
        """Drop the mapped runs' pages from resident memory (they stay mapped)."""
        for keys, counts in self.maps.values():
            for a in (keys, counts):
                m = getattr(a, "_mmap", None)
                if m is not None and hasattr(mmap, "MADV_DONTNEED"):
                    with contextlib.suppress(OSError, ValueError):
                        m.madvise(mmap.MADV_DONTNEED)

    def drop_runs(self):
        for run in self.runs:
            self.maps.pop(run, None)
            for part in (".keys", ".counts", ".hist"):
                self.folder.delete(run + part)
        self.runs = []


def last_words(keys):
    """How many of the n-grams ``keys`` end in each word: (max id + 1,) int64."""
    return np.bincount(np.asarray(keys)[:, -1], minlength=1).astype(np.int64)


def save_run(folder, run, keys, counts):
    """Write a suffix-sorted run into ``folder``, with its ``last_words`` (the plan
    of the parts reads those rather than the runs, and cuts the runs by them)."""
    folder.save(run + ".keys", keys)
    folder.save(run + ".counts", counts)
    folder.save(run + ".hist", last_words(keys))


def table_peak(counter):
    """Bytes the counter's table would hold at its next growth, plus the suffix sort's
    buffers: what must fit in the budget before counting goes on in memory."""
    rows = counter.distinct_ngrams
    return 2 * counter.table_bytes + rows * (counter.order + 2) * 4 + rows * (4 * counter.order + 8)


def source_names(text):
    """The inputs as a list: file objects and '-' as they are, paths expanded when
    they hold glob patterns (sorted), in the order given."""
    items = list(text) if isinstance(text, (list, tuple)) else [text]
    if not items:
        raise ValueError("no training text given")
    out = []
    for item in items:
        if isinstance(item, (str, bytes, os.PathLike)):
            path = os.fsdecode(item)
            if path != "-" and not os.path.exists(path) and glob.has_magic(path):
                matches = sorted(glob.glob(path))
                if not matches:
                    raise FileNotFoundError(2, "No file matches the pattern", path)
                out.extend(matches)
                continue
            out.append(path)
        else:
            out.append(item)
    return out


def text_name(text):
    if isinstance(text, (list, tuple)):
        return " ".join(text_name(t) for t in text)
    if isinstance(text, (str, bytes, os.PathLike)):
        return "-" if os.fsdecode(text) == "-" else os.fsdecode(text)
    return getattr(text, "name", "<stream>")


def open_source(text):
    """(binary reader, whether we own it, byte size for the progress bar or 0)."""
    own = isinstance(text, (str, bytes, os.PathLike))
    f = open_binary(text_name(text)) if own else text
    total = 0
    if isinstance(f, io.BufferedReader):  # plain file (or stdin): a byte-based bar
        try:
            total = os.fstat(f.fileno()).st_size
        except (OSError, ValueError):
            total = 0
    return f, own, total


def chunks(f, total, report, size=MAX_CHUNK, spaces=b" \t\r\0"):
    """Yield (bytes, number of the chunk's first line, open) from the binary or text
    reader ``f``: whole lines (``open`` False; the last chunk may end without a
    newline), or, of a line longer than a block, a piece ending at a word's end whose
    line goes on in the next chunk (``open`` True: Counter.feed(open_end=True)), so
    that one enormous line is counted within the memory budget like many short ones."""
    report.start(total)
    carry = b""             # the start of a line that has not ended yet
    line = 1
    done = 0
    while True:
        block = f.read(size)
        if isinstance(block, str):
            block = block.encode("utf-8", "surrogateescape")
        if not block:
            break
        done += len(block)
        block = carry + block if carry else block
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            space = max(block.rfind(c) for c in (spaces[i:i + 1] for i in range(len(spaces))))
            if space < 0:
                carry = block           # one word longer than a block: keep reading
                continue
            carry = block[space + 1:]
            yield block[:space + 1], line, True
            report.update(done)
            continue
        carry = block[cut:]
        yield block[:cut], line, False
        line += block.count(b"\n", 0, cut)
        report.update(done)
    if carry:
        yield carry, line, False
    report.finish()


def check_utf8(chunk, name, line):
    """A FormatError naming the line of the first byte of ``chunk`` that is not UTF-8:
    for text that goes to a neural model, whose words are UTF-8 (estimation itself
    takes words as bytes in any encoding, as lmplz does)."""
    try:
        codecs.utf_8_decode(chunk, "strict", True)
    except UnicodeDecodeError as e:
        bad_line = line + chunk.count(b"\n", 0, e.start)
        column = e.start - (chunk.rfind(b"\n", 0, e.start) + 1) + 1
        raise FormatError(f"invalid UTF-8 (byte 0x{chunk[e.start]:02x} at byte {column} of the line); the text "
                          "must be UTF-8", name, bad_line) from None


def _spaces(counter):
    """The bytes that end a word for ``counter`` (besides the newline)."""
    return b" \t\v\f\r" if counter.kenlm_spaces else b" \t\r\0"


def feed(counter, chunk, name, line, utf8=False, open_end=False):
    """Count one chunk (``utf8``: refuse bytes that are not UTF-8; ``open_end``: its
    last line goes on in the next chunk); turn the kernel's status into an exception."""
    if utf8:
        check_utf8(chunk, name, line)
    rc = counter.feed(chunk, open_end)
    if rc == 0:
        return
    if rc == -1:
        raise MemoryError("out of memory while counting n-grams")
    if rc == -3:
        raise MemoryError("too many distinct n-grams or words for 32-bit indices")
    if rc == -2:
        at = counter.err_offset
        end = at
        spaces = _spaces(counter) + b"\n"
        while end < len(chunk) and chunk[end:end + 1] not in spaces:
            end += 1
        word = word_str(chunk[at:end])
        if counter.closed:          # (a vocabulary given: nothing to skip them with)
            msg = f"the text contains the reserved token {word!r} (it is added around every line)"
        else:
            msg = (f"special word {word} is not allowed in the text (it is added around every line); "
                   "pass --skip_symbols (skip_symbols=True) to treat <s>, </s> and <unk> as whitespace")
        raise FormatError(msg, name, line + chunk.count(b"\n", 0, at))
    raise RuntimeError(f"n-gram counting failed with status {rc}")


def count_source(source, counts, report, budget, folder, utf8=False):
    """Count one input into ``counts``, spilling runs to ``folder()`` (a callable
    that makes the folder on first use) when the table outgrows ``budget``
    (``utf8``: the text must be UTF-8, see check_utf8)."""
    name = text_name(source)
    f, own, total = open_source(source)
    size = int(min(MAX_CHUNK, max(MIN_CHUNK, budget // 64)))
    read = 0
    try:
        report.say(f"Reading {name if name != '-' else 'stdin'}")
        for chunk, line, open_end in chunks(f, total, report, size, _spaces(counts.counter)):
            feed(counts.counter, chunk, name, line, utf8, open_end)
            read += len(chunk)
            if table_peak(counts.counter) > budget:
                try:
                    counts.spill(folder())
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    raise no_room(folder(), read, total) from None
    except CompressedDataError:
        raise                       # the readers already name the file
    except (EOFError, lzma.LZMAError, zlib.error, gzip.BadGzipFile, OSError) as e:
        if isinstance(e, OSError) and not isinstance(e, gzip.BadGzipFile) and e.errno is not None:
            raise
        raise FormatError(f"corrupt or truncated compressed text ({e})", name) from None
    finally:
        if own and f is not sys.stdin.buffer:
            f.close()


def no_room(folder, read, total):
    """The error of a spill that found its folder full: what the run's files there
    hold, and what counting the whole text would spill, projected from the share read
    (not only the write that failed)."""
    held = folder.disk_bytes()
    free = shutil.disk_usage(folder.path).free
    text = f"no space left for temporary files in {folder.parent}: {_mib(held)} of this run's files there, " \
           f"{_mib(free)} free"
    if total and read:
        text += (f"; counting the whole text spills about {_mib(held * total / read)} "
                 f"(projected from the {read / total:.0%} read), and the later steps more")
    return OSError(errno.ENOSPC, text + " (set the folder with -T, or give more memory with -S)", folder.parent)


def _mib(n):
    return f"{n / (1 << 20):,.1f} MiB"


def count(text, config, report, budget=None, folder=None):
    """Count ``text`` (one input or a list); returns ``Counts``.  ``budget`` (bytes)
    bounds the table; ``folder`` is a callable giving the temporary folder."""
    counts = Counts(_kn.Counter(config.order, config.skip_symbols), text_name(text))
    budget = budget if budget is not None else config.memory
    for source in source_names(text):
        count_source(source, counts, report, budget, folder)
    counter = counts.counter
    if counter.tokens == 0:
        what = "is empty" if counter.sentences == 0 else "has no words (only blank lines)"
        raise ValueError(f"{counts.name}: the text {what}; nothing to estimate")
    return counts


def limit_vocab(path, vocab_find, vocab_size):
    """1 for every word that is not in the --limit_vocab_file list (never specials)."""
    prune_word = np.ones(vocab_size, dtype=np.uint8)
    prune_word[:3] = 0
    with open_binary(path) as f:
        for line in f:
            for word in line.replace(b"\0", b" ").split():
                i = vocab_find(word)
                if i >= 0:
                    prune_word[i] = 0
    return prune_word
