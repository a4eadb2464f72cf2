"""The nplm binary container and back-off binaries: same results as the ARPA,
fast mapped loading, and clear errors for truncated, corrupt or foreign files."""
import os
import struct

import numpy as np
import pytest

import nplm
from nplm.errors import FormatError
from nplm.formats import container
from conftest import REFERENCE, need_shared


def test_container_round_trip(tmp_path):
    arrays = {"a": np.arange(10, dtype=np.float32), "b": np.ones((3, 4), dtype=np.uint64),
              "empty": np.zeros((0, 5), dtype=np.int32), "c": np.array([1, 2, 3], dtype=">i4")}
    path = tmp_path / "x.nplm"
    container.write(path, "test", {"k": [1, 2]}, arrays)
    c = container.read(path, expect_kind="test")
    assert c.kind == "test" and c.config == {"k": [1, 2]}
    for name, a in arrays.items():
        assert np.array_equal(c.arrays[name], a) and c.arrays[name].shape == a.shape
        assert not c.arrays[name].flags.writeable
    for name in ("a", "b"):
        assert c.arrays[name].ctypes.data % container.ALIGN == 0
    c.verify()
    with pytest.raises(FormatError, match="expected 'other'"):
        container.read(path, expect_kind="other")


def _good(tmp_path):
    path = tmp_path / "good.nplm"
    container.write(path, "test", {}, {"a": np.arange(1000, dtype=np.float32)})
    return path, path.read_bytes()


@pytest.mark.parametrize("mutate,message", [
    (lambda b: b[:5], "bad magic|truncated"),
    (lambda b: b[:20], "truncated"),
    (lambda b: b[:-1], "truncated"),
    (lambda b: b + b"\0", "trailing"),
    (lambda b: b"\x93NPLM\r\n\x1a" + struct.pack("<I", 99) + b[12:], "version 99"),
    (lambda b: b[:32] + b"[" + b[33:], "checksum"),
    (lambda b: b[:24] + struct.pack("<Q", 10 ** 15) + b[32:], "header says"),
    (lambda b: b[:16] + struct.pack("<Q", 10 ** 12) + b[24:], "header length"),
    (lambda b: b"PK\x03\x04" + b[4:], "bad magic"),
    (lambda b: b"", "bad magic"),
])
def test_container_rejects_damage(tmp_path, mutate, message):
    path, raw = _good(tmp_path)
    bad = tmp_path / "bad.nplm"
    bad.write_bytes(mutate(raw))
    with pytest.raises(FormatError, match=message) as e:
        container.read(bad)
    assert "bad.nplm" in str(e.value)


def test_container_rejects_lying_array_descriptions(tmp_path):
    import json
    import zlib
    path, raw = _good(tmp_path)
    _, version, _, hlen, total = struct.unpack("<8sIIQQ", raw[:32])
    meta = json.loads(raw[32:32 + hlen])
    for field, value, message in [("shape", [10 ** 9], "does not match"), ("offset", 1 << 40, "outside"),
                                  ("dtype", "|O", "unsupported"), ("shape", [-4], "negative")]:
        m = json.loads(json.dumps(meta))
        m["arrays"]["a"][field] = value
        if field == "shape" and value == [10 ** 9]:
            m["arrays"]["a"]["nbytes"] = 4
        header = json.dumps(m).encode()
        body = raw[32 + hlen:]
        blob = struct.pack("<8sIIQQ", container.MAGIC, version, zlib.crc32(header), len(header), 0)
        data = blob + header + body
        data = data[:24] + struct.pack("<Q", len(data)) + data[32:]
        bad = tmp_path / "lie.nplm"
        bad.write_bytes(data)
        with pytest.raises(FormatError, match=message):
            container.read(bad)


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    need_shared()
    arpa = str(REFERENCE / "ptb5k.o4.arpa.xz")
    out = tmp_path_factory.mktemp("b") / "o4.nplm"
    nplm.build_binary(arpa, str(out))
    return arpa, out


def test_binary_equals_arpa(binary):
    arpa, out = binary
    cfg = nplm.Config()
    cfg.show_progress = False
    a, b = nplm.Model(arpa, cfg), nplm.Model(str(out))
    lines = (REFERENCE / "ptb5k.txt").read_text().splitlines()[:500]
    assert np.array_equal(a.score_sentences(lines), b.score_sentences(lines))
    pa, la, oa, _ = a.full_scores_batch(lines)
    pb, lb, ob, _ = b.full_scores_batch(lines)
    assert np.array_equal(pa, pb) and np.array_equal(la, lb) and np.array_equal(oa, ob)
    assert a.vocab.words() == b.vocab.words()


def test_binary_detected_by_content(binary, tmp_path):
    _, out = binary
    renamed = tmp_path / "model.arpa"
    renamed.write_bytes(out.read_bytes())
    assert nplm.Model(str(renamed)).order == 4


def test_truncated_binary_model(binary, tmp_path):
    _, out = binary
    raw = out.read_bytes()
    for cut in (len(raw) // 2, len(raw) - 8, 40):
        bad = tmp_path / "cut.nplm"
        bad.write_bytes(raw[:cut])
        with pytest.raises(OSError, match="truncated|Cannot read model"):
            nplm.Model(str(bad))


def test_binary_with_corrupt_tables_does_not_hang_or_crash(binary, tmp_path):
    """Flip bytes all over the data region: loading either fails cleanly or the
    model answers (bounded probing, ids clamped) -- it never crashes or hangs."""
    _, out = binary
    raw = bytearray(out.read_bytes())
    rng = np.random.default_rng(0)
    lines = (REFERENCE / "ptb5k.txt").read_text().splitlines()[:50]
    header_end = 4096
    for trial in range(10):
        bad = bytearray(raw)
        for pos in rng.integers(header_end, len(raw), 2000):
            bad[pos] = rng.integers(0, 256)
        path = tmp_path / f"flip{trial}.nplm"
        path.write_bytes(bytes(bad))
        try:
            m = nplm.Model(str(path))
        except OSError:
            continue
        m.score_sentences(lines)


def test_binary_full_of_keys_cannot_hang(tmp_path):
    """A hostile table without any empty bucket: probing is bounded."""
    need_shared()
    arpa = str(REFERENCE / "ptb5k.o2.arpa.xz")
    out = tmp_path / "o2.nplm"
    nplm.build_binary(arpa, str(out))
    c = container.read(out)
    arrays = {k: np.array(v) for k, v in c.arrays.items()}
    arrays["longest"][:, :2] = 7          # every key nonzero and wrong
    arrays["vocab_keys"][:] = 3
    container.write(out, c.kind, c.config, arrays)
    m = nplm.Model(str(out))
    assert np.isfinite(m.score("the cat sat"))


def test_load_is_a_memory_map(binary):
    _, out = binary
    m = nplm.Model(str(out))
    uni = m._data.arrays["uni"]
    assert not uni.flags.owndata and not uni.flags.writeable
