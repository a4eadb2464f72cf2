"""The nplm binary container: one versioned, memory-mappable file per model.

Layout (all integers little-endian)::

    0   8  magic  b"\\x93NPLM\\r\\n\\x1a"   (catches text-mode mangling, like PNG)
    8   4  container version (uint32)
    12  4  crc32 of the JSON header
    16  8  JSON header length in bytes
    24  8  total file size in bytes (catches truncation before anything is mapped)
    32  .  JSON header (UTF-8), then zero padding to a 64-byte boundary
    .   .  arrays, each starting on a 64-byte boundary

The JSON header is ``{"kind": str, "config": {...}, "arrays": {name: {"dtype",
"shape", "offset", "nbytes", "crc32"}}}``.  ``kind`` says which model class reads it
("backoff", "neural", ...); ``config`` is that class's own metadata.

Loading maps the file read-only and returns numpy views into the map: nothing is
parsed or copied, so load time does not grow with the model.  Every header field is
validated against the file size before anything is mapped or allocated.
"""
import json
import mmap
import os
import struct
import zlib

import numpy as np

from nplm.errors import FormatError
from nplm.io._mapguard import guard
from nplm.io.atomic import atomic_write, refuse_stdout

MAGIC = b"\x93NPLM\r\n\x1a"
VERSION = 1
ALIGN = 64
_FIXED = struct.Struct("<8sIIQQ")
_DTYPES = {"<f4", "<f8", "<f2", "|i1", "|u1", "|b1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8"}
_MAX_HEADER = 1 << 28  # a JSON header over 256 MiB is certainly corrupt


def _pad(n):
    return (-n) % ALIGN


def is_container(path):
    """True when ``path`` starts with the container magic."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def altered_magic(head):
    """Whether ``head`` (a file's first bytes) is an nplm container header whose magic
    was altered: 1 or 2 of its 8 bytes differ, or the rest of the fixed header (version
    1, JSON after it) is intact.  Text never comes this close."""
    if len(head) < len(MAGIC) or head.startswith(MAGIC):
        return False
    if sum(a != b for a, b in zip(head[:len(MAGIC)], MAGIC)) <= 2:
        return True
    return (len(head) >= _FIXED.size + 2 and head[_FIXED.size:_FIXED.size + 2] == b'{"'
            and _FIXED.unpack(head[:_FIXED.size])[1] == VERSION)


ALTERED_MAGIC = ("this is a damaged nplm binary: its 8-byte header magic was altered; restore the file "
                 "from a good copy")


def write(path, kind, config, arrays, checksum=True):
    """Write a container atomically.

    kind: str, the model kind; config: JSON-serialisable dict;
    arrays: {name: numpy array}, written C-contiguous in little-endian order."""
    refuse_stdout(path)
    prepared = {}
    specs = {}
    for name, arr in arrays.items():
        a = np.ascontiguousarray(arr)
        if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and not np.little_endian):
            a = a.astype(a.dtype.newbyteorder("<"))
        dt = a.dtype.str
        if dt not in _DTYPES:
            raise TypeError(f"array {name!r}: unsupported dtype {a.dtype}")
        prepared[name] = a
        specs[name] = {"dtype": dt, "shape": list(a.shape), "offset": 0, "nbytes": int(a.nbytes),
                       "crc32": zlib.crc32(a.data) if checksum else None}
    # Offsets depend on the header length, which depends on the offsets' digits:
    # iterate until the layout is stable (two rounds in practice).
    header_len = 0
    for _ in range(8):
        offset = _FIXED.size + header_len
        offset += _pad(offset)
        for name, a in prepared.items():
            specs[name]["offset"] = offset
            offset += a.nbytes + _pad(a.nbytes)
        header = json.dumps({"kind": kind, "config": config, "arrays": specs},
                            sort_keys=True, separators=(",", ":")).encode("utf-8")
        if len(header) == header_len:
            break
        header_len = len(header)
    total = offset
    with atomic_write(path) as f:      # (a pipe too: positions are counted, not asked)
        at = f.write(_FIXED.pack(MAGIC, VERSION, zlib.crc32(header), len(header), total))
        at += f.write(header)
        at += f.write(b"\0" * _pad(_FIXED.size + len(header)))
        for name, a in prepared.items():
            assert at == specs[name]["offset"]
            at += f.write(a.data)
            at += f.write(b"\0" * _pad(a.nbytes))
        assert at == total


class Container:
    """A loaded container: ``kind``, ``config`` and ``arrays`` (read-only views into
    the memory map, which stays open as long as this object or any array lives)."""

    def __init__(self, path, kind, config, arrays, mm):
        self.path = path
        self.kind = kind
        self.config = config
        self.arrays = arrays
        self._mmap = mm

    def verify(self):
        """Check every array against its stored crc32 (reads the whole file)."""
        for name, spec in self._specs.items():
            if spec.get("crc32") is not None:
                if zlib.crc32(self.arrays[name].data) != spec["crc32"]:
                    raise FormatError(f"array {name!r} is corrupt (checksum mismatch)", self.path)


def read(path, expect_kind=None, populate=False, copy=False):  # noqa: C901 - validates each header field and array with its own message
    """Map a container (``copy``: read it into private memory instead, as kenlm's
    LoadMethod.READ does: the model then no longer depends on the file, which may be
    truncated or rewritten in place while it is loaded).  Raises FormatError naming
    ``path`` for anything foreign, truncated or inconsistent, before mapping it."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        fixed = f.read(_FIXED.size)
        if len(fixed) < len(MAGIC) or fixed[:len(MAGIC)] != MAGIC:
            raise FormatError("not an nplm binary file (bad magic)", path)
        if len(fixed) < _FIXED.size:
            raise FormatError(f"truncated nplm binary file ({size} bytes, header needs {_FIXED.size})", path)
        _, version, crc, header_len, total = _FIXED.unpack(fixed)
        if version != VERSION:
            raise FormatError(f"nplm binary format version {version}; this nplm reads version {VERSION}"
                              + (" (written by a newer nplm: upgrade)" if version > VERSION else ""), path)
        if total != size:
            raise FormatError(f"file is {size} bytes but its header says {total}"
                              + (" (truncated)" if size < total else " (trailing data)"), path)
        if header_len > min(_MAX_HEADER, size - _FIXED.size):
            raise FormatError(f"header length {header_len} exceeds the file", path)
        header = f.read(header_len)
        if zlib.crc32(header) != crc:
            raise FormatError("header checksum mismatch (file corrupt)", path)
        try:
            meta = json.loads(header.decode("utf-8"))
            kind = meta["kind"]
            config = meta["config"]
            specs = meta["arrays"]
            if not isinstance(kind, str) or not isinstance(config, dict) or not isinstance(specs, dict):
                raise TypeError("bad field types")
        except (ValueError, KeyError, TypeError) as e:
            raise FormatError(f"malformed header ({e})", path) from None
        if expect_kind is not None and kind != expect_kind:
            raise FormatError(f"holds a {kind!r} model, expected {expect_kind!r}", path)
        data_start = _FIXED.size + header_len
        checked = {}
        for name, spec in specs.items():
            try:
                dt = spec["dtype"]
                shape = tuple(int(s) for s in spec["shape"])
                offset = int(spec["offset"])
                nbytes = int(spec["nbytes"])
            except (KeyError, TypeError, ValueError):
                raise FormatError(f"array {name!r}: malformed description", path) from None
            if not isinstance(dt, str) or dt not in _DTYPES:
                raise FormatError(f"array {name!r}: unsupported dtype {dt!r}", path)
            if any(s < 0 for s in shape):
                raise FormatError(f"array {name!r}: negative dimension in shape {shape}", path)
            count = 1
            for s in shape:
                count *= s
            if count * np.dtype(dt).itemsize != nbytes:
                raise FormatError(f"array {name!r}: shape {shape} does not match {nbytes} bytes", path)
            if offset < data_start or offset % ALIGN or offset + nbytes > size:
                raise FormatError(f"array {name!r}: bytes {offset}..{offset + nbytes} lie outside the data "
                                  f"region of a {size}-byte file", path)
            checked[name] = (np.dtype(dt), shape, offset, count)
        spans = sorted((c[2], c[2] + c[3] * c[0].itemsize, n) for n, c in checked.items())
        for (_s0, e0, n0), (s1, _e1, n1) in zip(spans, spans[1:]):
            if s1 < e0:
                raise FormatError(f"arrays {n0!r} and {n1!r} overlap", path)
        if copy:
            mm = _read_whole(f, size, path)
        else:
            flags = mmap.MAP_SHARED
            if populate and hasattr(mmap, "MAP_POPULATE"):
                flags |= mmap.MAP_POPULATE
            mm = mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ) if size else None
            guard(mm, path)     # truncating the file under it: an exception, not SIGBUS
    arrays = {}
    for name, (dt, shape, offset, count) in checked.items():
        if count == 0:
            arrays[name] = np.zeros(shape, dtype=dt)
            arrays[name].setflags(write=False)
        else:
            arrays[name] = np.frombuffer(mm, dtype=dt, count=count, offset=offset).reshape(shape)
    c = Container(path, kind, config, arrays, mm)
    c._specs = specs
    return c


def _read_whole(f, size, path):
    """The ``size`` bytes of the open file ``f`` in a private read-only array; a
    FormatError if the file is shorter now than when its header was checked."""
    buf = np.empty(size, np.uint8)
    view = memoryview(buf)
    f.seek(0)
    got = 0
    while got < size:
        n = f.readinto(view[got:])
        if not n:
            raise FormatError(f"the file shrank to {got} bytes while it was read (it was {size})", path)
        got += n
    buf.setflags(write=False)
    return buf
