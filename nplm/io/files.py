"""Opening plain and compressed files, pipes and stdin for reading.

Compression is detected from the magic bytes, not the file name, so a ``.arpa`` that
is really gzip still loads, and stdin can be compressed too.
"""
import bz2
import gzip
import io
import lzma
import os
import sys
import zlib

from nplm.errors import CompressedDataError


def _guarded(cls):
    """A subclass of a decompressing file class whose reads raise
    CompressedDataError naming the file, instead of the bare EOFError /
    zlib.error / LZMAError / OSError("Invalid data stream") the decompressors
    raise for damaged data (which no reader documents or names a file in)."""
    def make(method):
        def read(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except CompressedDataError:
                raise
            except (EOFError, zlib.error, lzma.LZMAError, OSError) as e:
                if isinstance(e, OSError) and not isinstance(e, gzip.BadGzipFile) and e.errno is not None:
                    raise  # a real I/O error, not damaged data
                raise CompressedDataError(f"corrupt or truncated compressed data ({e})",
                                          getattr(self, "nplm_path", None)) from e
        return read
    def close(self):
        # a decompressor over a file object leaves it open; a pipe's is ours to close
        try:
            cls.close(self)
        finally:
            owned = getattr(self, "nplm_owned", None)
            if owned is not None:
                owned.close()
    names = ("read", "read1", "readinto", "readinto1", "readline", "readlines", "peek")
    methods = {n: make(getattr(cls, n)) for n in names if hasattr(cls, n)}
    return type("Guarded" + cls.__name__, (cls,), dict(methods, close=close))


def _opener(cls):
    guarded = _guarded(cls)

    def open_(source, mode="rb"):
        if cls is gzip.GzipFile and not isinstance(source, (str, bytes, os.PathLike)):
            f = guarded(fileobj=source, mode=mode)
        else:
            f = guarded(source, mode)
        f.nplm_path = source if isinstance(source, (str, bytes, os.PathLike)) else "-"
        return f
    return open_


_MAGIC = (
    (b"\x1f\x8b", "gzip", _opener(gzip.GzipFile)),
    (b"BZh", "bzip2", _opener(bz2.BZ2File)),
    (b"\xfd7zXZ\x00", "xz", _opener(lzma.LZMAFile)),
)


def compression_of(head):
    """The opener for a file starting with ``head`` bytes (None for plain)."""
    for magic, _, opener in _MAGIC:
        if head.startswith(magic):
            return opener
    return None


def compression_name(head):
    """"gzip", "bzip2" or "xz" for a file starting with ``head`` bytes (None for plain)."""
    for magic, name, _ in _MAGIC:
        if head.startswith(magic):
            return name
    return None


def open_binary(path):
    """A binary reader of ``path`` ('-' is stdin), decompressing gzip/bz2/xz.

    Raises OSError naming the path when it cannot be opened."""
    if path == "-" or path is None:
        raw = sys.stdin.buffer
        buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)
        opener = compression_of(buffered.peek(6)[:6])
        return opener(buffered, "rb") if opener else buffered
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(21, "Is a directory", path)
    f = open(path, "rb")
    try:
        if not f.seekable():    # a pipe (--text <(zcat t.gz), a FIFO): sniff without consuming
            return decompressed(f, path)
        opener = compression_of(f.read(6))
        f.seek(0)
    except BaseException:
        f.close()
        raise
    if opener is None:
        return f
    f.close()
    return opener(path, "rb")


def decompressed(f, path):
    """A reader of the open binary stream ``f`` (with peek, at its start),
    decompressing gzip/bz2/xz; closing it closes ``f``."""
    opener = compression_of(f.peek(6)[:6])
    if opener is None:
        return f
    z = opener(f, "rb")
    z.nplm_path, z.nplm_owned = path, f
    return z


# --- what a model file holds, from one open ------------------------------------------

SNIFF_BYTES = 1 << 16
NPLM_MAGIC = b"\x93NPLM\r\n\x1a"
KENLM_MAGIC = b"mmap lm http://kheafield.com/code"
SPEC_MARKS = (b'"nplm"', b'"interpolation"')


def kind_of_head(head):
    """What a file starting with the bytes ``head`` (its first SNIFF_BYTES or all of
    it) holds: "nplm" (an nplm binary), "kenlm" (a KenLM binary), "spec" (an
    interpolation spec: a JSON object naming itself) or "arpa" (anything else; the
    ARPA reader, which decompresses, says what is wrong with it)."""
    if head.startswith(NPLM_MAGIC):
        return "nplm"
    if head.startswith(KENLM_MAGIC):
        return "kenlm"
    if head.lstrip().startswith(b"{") and all(mark in head for mark in SPEC_MARKS):
        return "spec"
    return "arpa"


class _Replay(io.RawIOBase):
    """The bytes ``head`` already read from the stream ``rest``, then the rest of it."""

    def __init__(self, head, rest):
        self._head = memoryview(head)
        self._rest = rest

    def readable(self):
        return True

    def readinto(self, b):
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._rest.readinto(b)

    def close(self):
        if not self.closed:
            self._rest.close()
        super().close()


def sniff(path):
    """Open ``path`` ('-' is stdin) once: (kind, stream), ``kind`` as kind_of_head
    says and ``stream`` a buffered binary reader of the whole file from its first
    byte, which the caller closes.  A pipe, /dev/stdin or a FIFO can be read only
    once, so everything that reads the model must read this stream: a second open
    would find the bytes that the first consumed gone.  For a regular file the
    stream is the open file itself (seekable, so its path can also be mapped)."""
    if path in (None, "-"):
        f = open(sys.stdin.fileno(), "rb", closefd=False)
    else:
        path = os.fspath(path)
        if os.path.isdir(path):
            raise IsADirectoryError(21, "Is a directory", path)
        f = open(path, "rb")
    try:
        if f.seekable():
            head = f.read(SNIFF_BYTES)
            f.seek(0)
            return kind_of_head(head), f
        parts, got = [], 0
        while got < SNIFF_BYTES:
            part = f.read1(SNIFF_BYTES - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        head = b"".join(parts)
        return kind_of_head(head), io.BufferedReader(_Replay(head, f), SNIFF_BYTES)
    except BaseException:
        f.close()
        raise


def open_text(path, encoding="utf-8", errors="strict"):
    """A text reader of ``path`` ('-' is stdin), decompressing gzip/bz2/xz."""
    return io.TextIOWrapper(open_binary(path), encoding=encoding, errors=errors, newline="\n")
