"""Memory behaviour of loads.

* LoadMethod.LAZY maps a binary without reading it: the mapping's resident pages
  (from /proc/self/smaps, exact for this one file) stay far below the file size
  until queries touch them; the default (populate) load has them all resident.
* A binary larger than the available memory is refused for populate/read loads
  with a message that suggests LAZY, and LAZY maps it fine -- tested with a real
  sparse file bigger than MemAvailable, so nothing is mocked.
* An ARPA file whose header announces more n-grams than memory can hold is
  refused before anything is allocated.
"""
import gzip
import json
import os
import zlib

import numpy as np
import pytest

import nplm
from nplm.backoff import arpa
from nplm.backoff import binary as backoff
from nplm.io import container
from nplm.io.resources import mem_available

from helpers import ROOT

TOY_ARPA = ROOT / "examples" / "toy.arpa"
SENTENCES = ["the cat sat on the mat", "a dog chased the bird", "the bird sang in the tree", ""]

def mapped_rss(path):
    """Resident bytes of this process's mappings of ``path``."""
    target = os.path.realpath(path)
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                inside = len(head) >= 6 and head[5] == target
            elif inside and line.startswith("Rss:"):
                total += int(head[1]) * 1024
    return total


def process_rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def config(method):
    c = nplm.Config()
    c.load_method = method
    c.show_progress = False
    c.arpa_complain = nplm.ARPALoadComplain.NONE
    return c


def zipf_text(path, lines, vocab=20000, seed=9):
    rng = np.random.default_rng(seed)
    words = np.array([f"w{i}" for i in range(vocab)])
    p = 1 / np.arange(1, vocab + 1) ** 0.9
    p /= p.sum()
    with open(path, "w") as f:
        for n in rng.integers(5, 30, size=lines):
            f.write(" ".join(words[rng.choice(vocab, size=n, p=p)]) + "\n")


@pytest.fixture(scope="module")
def big_binary(tmp_path_factory):
    d = tmp_path_factory.mktemp("memory")
    zipf_text(d / "text.txt", 15000)
    out = d / "big.nplm"
    nplm.estimate(str(d / "text.txt"), 4, binary=str(out), discount_fallback=True, progress=False)
    assert out.stat().st_size > 8 << 20
    return out


def test_lazy_load_does_not_read_the_file(big_binary):
    size = big_binary.stat().st_size
    before = process_rss()
    model = nplm.Model(str(big_binary), config(nplm.LoadMethod.LAZY))
    resident = mapped_rss(big_binary)
    assert resident < 0.15 * size, (resident, size)
    assert process_rss() - before < 0.25 * size
    # Queries fault pages in.  How many depends on the kernel (fault-around, large
    # page-cache folios: a few random hash probes can map megabytes), so only the
    # direction is checked here; the point above is that loading reads nothing.
    for i in range(20):
        model.score(f"w{i} w{i + 1} w{i + 2} w{2 * i}")
    touched = mapped_rss(big_binary)
    assert resident < touched <= size + (1 << 16), (resident, touched, size)


def test_populate_load_has_the_file_resident(big_binary):
    size = big_binary.stat().st_size
    model = nplm.Model(str(big_binary), config(nplm.LoadMethod.POPULATE_OR_READ))
    assert mapped_rss(big_binary) > 0.9 * size
    lazy = nplm.Model(str(big_binary), config(nplm.LoadMethod.LAZY))
    for s in ["w1 w2 w3", "w5 w7 w11 w13", "w0 w0 w0"]:
        assert model.score(s) == lazy.score(s)


def _write_with_hole(path, base, hole):
    """The arrays of binary ``base`` plus an array of ``hole`` zero bytes that
    occupies no disk space (a sparse file), laid out as container.py documents."""
    c = container.read(base)
    specs, _chunks = {}, []
    fixed = container._FIXED.size
    header_len = 0
    for _ in range(8):
        offset = fixed + header_len
        offset += (-offset) % container.ALIGN
        specs = {}
        for name, a in list(c.arrays.items()) + [("zz_hole", None)]:
            nbytes = hole if a is None else a.nbytes
            specs[name] = {"dtype": "|u1" if a is None else a.dtype.str,
                           "shape": [hole] if a is None else list(a.shape),
                           "offset": offset, "nbytes": nbytes, "crc32": None}
            offset += nbytes + (-nbytes) % container.ALIGN
        header = json.dumps({"kind": c.kind, "config": c.config, "arrays": specs}).encode()
        if len(header) == header_len:
            break
        header_len = len(header)
    total = offset
    with open(path, "wb") as f:
        f.write(container._FIXED.pack(container.MAGIC, container.VERSION, zlib.crc32(header),
                                      len(header), total))
        f.write(header)
        for name, a in c.arrays.items():
            f.seek(specs[name]["offset"])
            f.write(a.tobytes())
        f.truncate(total)
    return total


def test_binary_larger_than_memory_refused_unless_lazy(tmp_path):
    avail = mem_available()
    assert avail is not None
    base = tmp_path / "toy.nplm"
    backoff.build_binary(arpa.read_arpa(TOY_ARPA), base)
    huge = tmp_path / "huge.nplm"
    size = _write_with_hole(huge, base, avail + (4 << 30))
    assert os.stat(huge).st_blocks * 512 < 16 << 20, "the file system does not support sparse files"

    before = process_rss()
    for method in (nplm.LoadMethod.POPULATE_OR_READ, nplm.LoadMethod.READ, nplm.LoadMethod.PARALLEL_READ):
        with pytest.raises(nplm.ModelLoadError, match="LAZY") as info:
            nplm.Model(str(huge), config(method))
        assert "GiB" in str(info.value) and "huge.nplm" in str(info.value)
    assert process_rss() - before < 64 << 20

    # LAZY (and POPULATE_OR_LAZY, which falls back to it) maps it: a file bigger
    # than free memory loads in no time and answers exactly as the model without
    # the hole.
    small = nplm.Model(str(base))
    for method in (nplm.LoadMethod.LAZY, nplm.LoadMethod.POPULATE_OR_LAZY):
        model = nplm.Model(str(huge), config(method))
        for s in SENTENCES:
            assert model.score(s) == small.score(s)
        assert mapped_rss(huge) < 16 << 20
        assert process_rss() - before < 64 << 20
        del model
    assert size > avail


def test_arpa_header_beyond_memory_refused(tmp_path):
    avail = mem_available()
    body = TOY_ARPA.read_bytes().split(b"\n\n", 1)[1]
    n = avail // 16 + 1
    for name, opener in [("huge.arpa.gz", gzip.compress), ("huge.arpa", lambda b: b)]:
        path = tmp_path / name
        path.write_bytes(opener(b"\\data\\\nngram 1=71\nngram 2=%d\nngram 3=197\n\n" % n + body))
        before = process_rss()
        with pytest.raises(nplm.ModelLoadError, match="memory") as info:
            nplm.Model(str(path), config(nplm.LoadMethod.POPULATE_OR_READ))
        assert name in str(info.value) and "GiB" in str(info.value)
        assert process_rss() - before < 64 << 20


def test_arpa_header_that_fits_is_not_refused(tmp_path):
    """The check under-estimates: a header that fits loads (and a wrong count is
    then the ARPA reader's clean FormatError, not a memory error)."""
    body = TOY_ARPA.read_bytes().split(b"\n\n", 1)[1]
    path = tmp_path / "wrong.arpa.gz"
    path.write_bytes(gzip.compress(b"\\data\\\nngram 1=71\nngram 2=1000000\nngram 3=197\n\n" + body))
    with pytest.raises(nplm.ModelLoadError) as info:
        nplm.Model(str(path), config(nplm.LoadMethod.POPULATE_OR_READ))
    assert "memory" not in str(info.value)
    assert isinstance(info.value, nplm.FormatError)
    nplm.Model(str(TOY_ARPA), config(nplm.LoadMethod.POPULATE_OR_READ))
