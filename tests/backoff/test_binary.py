"""The nplm binary container and back-off binaries: same results as the ARPA,
fast mapped loading, and clear errors for truncated, corrupt or foreign files."""
import struct

import numpy as np
import pytest

import nplm
from nplm.errors import FormatError
from nplm.io import container

from helpers import REFERENCE, need_shared


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


def _chain_arpa(order):
    """An ARPA of the given order whose n-grams are "<s> a^(n-1)" (each one's context
    present), with p = -0.01 * n: scoring "a" * k after <s> uses them all."""
    grams = [[("<unk>", -2.0, -0.5), ("<s>", -99.0, -0.25), ("</s>", -1.0, 0.0), ("a", -0.5, -0.125)]]
    grams += [[(" ".join(["<s>"] + ["a"] * (n - 1)), -0.01 * n, -0.0625 if n < order else None)]
              for n in range(2, order + 1)]
    lines = ["\\data\\"] + [f"ngram {n}={len(g)}" for n, g in enumerate(grams, 1)] + [""]
    for n, g in enumerate(grams, 1):
        lines.append(f"\\{n}-grams:")
        lines += [f"{p}\t{w}" + (f"\t{b}" if b is not None else "") for w, p, b in g]
        lines.append("")
    return "\n".join(lines + ["\\end\\", ""])


@pytest.mark.parametrize("order", [17, 19, 20])
def test_orders_above_the_limit_are_refused_cleanly(tmp_path, order):
    """Orders 19+ overflowed the kernels' fixed per-order arrays (a segfault while
    building the tables); every way in must give the clean error instead."""
    from nplm._kernels import QUERY_MAX_ORDER
    assert order > QUERY_MAX_ORDER
    path = tmp_path / f"o{order}.arpa"
    path.write_text(_chain_arpa(order))
    cfg = nplm.Config()
    cfg.show_progress = False
    cfg.arpa_complain = nplm.ARPALoadComplain.NONE
    with pytest.raises(nplm.ModelLoadError, match=f"o{order}.arpa: order {order} is above the highest "
                                                  f"order nplm can load \\({QUERY_MAX_ORDER}\\)"):
        nplm.Model(str(path), cfg)
    with pytest.raises(FormatError, match=f"order {order} is above"):
        nplm.build_binary(str(path), str(tmp_path / "o.nplm"))
    assert not (tmp_path / "o.nplm").exists()


def test_highest_order_loads_and_scores(tmp_path):
    """The limit itself works: every n-gram of the chain model is used (brute force)."""
    from nplm._kernels import QUERY_MAX_ORDER as top
    path = tmp_path / "top.arpa"
    path.write_text(_chain_arpa(top))
    cfg = nplm.Config()
    cfg.show_progress = False
    m = nplm.Model(str(path), cfg)
    assert m.order == top
    got = [p for p, _, _ in m.full_scores(" ".join(["a"] * (top - 1)), eos=False)]
    assert got == pytest.approx([-0.01 * n for n in range(2, top + 1)], abs=1e-6)
    assert [n for _, n, _ in m.full_scores(" ".join(["a"] * (top - 1)), eos=False)] == list(range(2, top + 1))


def test_kernel_refuses_orders_beyond_its_arrays():
    """build_backoff_tables checks the order itself, whoever calls it."""
    from nplm import _kernels
    from nplm.backoff import _query
    order = _kernels.QUERY_MAX_ORDER + 4
    uni = np.zeros((4, 2), np.float32)
    ids = [np.zeros((1, n), np.int32) for n in range(2, order + 1)]
    probs = [np.zeros(1, np.float32) for _ in ids]
    with pytest.raises(ValueError, match=f"order {order} outside"):
        _query.build_backoff_tables(order, uni, ids, probs, list(probs))
    ids[1][0, 0] = 4                    # a word id beyond the 4 unigrams
    with pytest.raises(ValueError, match="outside the vocabulary"):
        _query.build_backoff_tables(3, uni, ids[:2], probs[:2], probs[:2])
    with pytest.raises(ValueError, match="malformed 3-gram"):
        _query.build_backoff_tables(3, uni, [ids[0], ids[0]], probs[:2], probs[:2])


def test_binary_claiming_a_high_order_is_refused(binary, tmp_path):
    """A binary header's order indexes the same fixed arrays: refused before use,
    even with every table such an order needs present."""
    _, out = binary
    c = container.read(out)
    arrays = {k: np.array(v) for k, v in c.arrays.items()}
    for n in range(4, 20):
        arrays[f"mid{n}"] = arrays["mid3"]
    bad = tmp_path / "o20.nplm"
    container.write(bad, c.kind, dict(c.config, order=20), arrays)
    from nplm._kernels import QUERY_MAX_ORDER
    with pytest.raises(nplm.ModelLoadError, match=f"order 20 outside 1..{QUERY_MAX_ORDER}"):
        nplm.Model(str(bad))
