"""Fuzzing every reader with mutated valid files (hypothesis).

Each example takes a valid file (ARPA plain and compressed, back-off and neural
nplm binaries, ISI NPLM text, interpolation spec, training/estimation text),
applies a few hostile mutations (truncation, bit flips, NaN/inf/huge/negative
numbers, overlong lines, NUL bytes, invalid UTF-8, deleted and duplicated lines)
and runs the reader in this process.  It must finish with either a result or a
documented exception (FormatError / ValueError / OSError); a segfault would kill
pytest, a hang trips the faulthandler watchdog, and an allocation beyond the
address-space cap set below surfaces as a MemoryError, which fails the test.

For binaries that load despite the damage, corruption must still be *detectable*:
either the per-array checksums (``container.read(path).verify()``) fail, or the
model answers exactly as the undamaged one (the flipped bit was padding).
"""
import bz2
import contextlib
import copy
import faulthandler
import gzip
import io
import json
import lzma
import os
import re
import resource
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nplm
from nplm.backoff import arpa
from nplm.backoff import binary as backoff
from nplm.errors import FormatError
from nplm.io import container

ROOT = Path(__file__).resolve().parents[1]
TOY_ARPA = ROOT / "examples" / "toy.arpa"
TOY_TEXT = ROOT / "examples" / "toy.txt"

# Documented error types of every reader.  MemoryError is deliberately absent: a
# header that makes a reader allocate beyond the cap is the bug we are looking for.
CLEAN = (FormatError, ValueError, OSError)
HANG_SECONDS = 60

# NPLM_FUZZ_EXAMPLES=2000 for a long randomised hunt; CI runs a fixed, quick set.
_LONG = int(os.environ.get("NPLM_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_LONG or 50, deadline=None, derandomize=not _LONG, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


# ----------------------------------------------------------------------------- guards

@pytest.fixture(scope="module", autouse=True)
def memory_cap():
    """Cap the address space at what the process already uses plus 3 GiB while
    fuzzing, so a reader that believes a hostile header and allocates terabytes
    gets a MemoryError here instead of taking the machine down."""
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    old = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm + (3 << 30)
    if old[1] != resource.RLIM_INFINITY:
        cap = min(cap, old[1])
    resource.setrlimit(resource.RLIMIT_AS, (cap, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


@contextlib.contextmanager
def watchdog():
    """Kill the run with every thread's traceback if a reader hangs."""
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def outcome(fn, *args, **kwargs):
    """fn's result, or the clean exception it raised.  Anything else fails the test."""
    with watchdog():
        try:
            return fn(*args, **kwargs)
        except CLEAN as e:
            assert str(e), "an error without a message"
            return e


# ----------------------------------------------------------------------------- mutations

NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
BAD_NUMBERS = [b"nan", b"NaN", b"inf", b"-inf", b"1e999", b"-1e999", b"99999999999999999999",
               b"18446744073709551616", b"4294967296", b"2147483648", b"-1", b"-2147483649", b"0",
               b"1e-50", b"0x10", b"1,5", b"", b"--1", b"1e", b"3.4028236e38"]
INSERTS = [b"\0", b"\0" * 7, b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\n", b"\n\n",
           b"\t", b"\r\n", b" ", b"\x0b\x0c", b"<s>", b"\\end\\\n", b"\\data\\\n", b"ngram 9=1\n",
           b"\\2-grams:\n", b"x" * 70000, b"\xe2\x80\xa8", b"\xef\xbb\xbf"]

mutation = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(0, 7)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.sampled_from(INSERTS)),
    st.tuples(st.just("number"), st.integers(0, 1 << 20), st.sampled_from(BAD_NUMBERS)),
    st.tuples(st.just("delete"), st.floats(0, 1), st.integers(1, 200)),
    st.tuples(st.just("dupline"), st.floats(0, 1)),
    st.tuples(st.just("random"), st.floats(0, 1), st.binary(min_size=1, max_size=16)),
)
mutations = st.lists(mutation, min_size=1, max_size=4)


def _pos(data, frac):
    return min(int(frac * len(data)), max(len(data) - 1, 0))


def mutate(data, muts):
    for m in muts:
        kind = m[0]
        if kind == "truncate":
            data = data[:int(m[1] * len(data))]
        elif not data:
            continue
        elif kind == "flip":
            p = _pos(data, m[1])
            data = data[:p] + bytes([data[p] ^ (1 << m[2])]) + data[p + 1:]
        elif kind == "insert":
            p = _pos(data, m[1])
            data = data[:p] + m[2] + data[p:]
        elif kind == "number":
            found = list(NUMBER.finditer(data))
            if found:
                hit = found[m[1] % len(found)]
                data = data[:hit.start()] + m[2] + data[hit.end():]
        elif kind == "delete":
            p = _pos(data, m[1])
            data = data[:p] + data[p + m[2]:]
        elif kind == "dupline":
            lines = data.split(b"\n")
            i = min(int(m[1] * len(lines)), len(lines) - 1)
            lines.insert(i, lines[i])
            data = b"\n".join(lines)
        elif kind == "random":
            p = _pos(data, m[1])
            data = data[:p] + m[2] + data[p + len(m[2]):]
    return data


COMPRESS = {"plain": lambda b: b, "gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


# ----------------------------------------------------------------------------- fixtures

SENTENCES = ["the cat sat on the mat", "a dog sat on a log", "the bird sang in the tree",
             "zebra the the cat", "", "unknownword <unk> mat", "the"]


def answers(model):
    """Everything a client might ask of a model, as comparable values."""
    out = []
    for s in SENTENCES:
        out.append(model.score(s))
        out.append(model.score(s, bos=False, eos=False))
        out.extend((r[0], r[1], r[2]) for r in model.full_scores(s))
    words = [model.vocab.word(i) for i in range(len(model.vocab))]
    out.append(tuple(words))
    out.append(tuple(int(model.vocab.id(w)) for w in words))
    state, out_state = nplm.State(), nplm.State()
    model.BeginSentenceWrite(state)
    for w in "the cat sat on".split():
        out.append(model.BaseScore(state, w, out_state))
        state, out_state = out_state, state
    out.append(tuple(model.score_sentences(SENTENCES)))
    return out


class Reference(tuple):
    """(file bytes, answers) with a short repr for hypothesis' failure reports."""

    def __repr__(self):
        return f"<{len(self[0])}-byte file>"


def same_answers(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, float):
            assert x == y or (np.isnan(x) and np.isnan(y)), (x, y)
        else:
            assert x == y


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def toy_arpa_bytes():
    return TOY_ARPA.read_bytes()


@pytest.fixture(scope="module")
def backoff_binary(work):
    path = work / "toy.nplm"
    backoff.build_binary(arpa.read_arpa(TOY_ARPA), path)
    return Reference((path.read_bytes(), answers(nplm.Model(str(path)))))


@pytest.fixture(scope="module")
def neural_binary(work):
    from helpers import make_net
    net = make_net("softmax-full-2", order=3)
    path = work / "net.nplm"
    net.save(path)
    model = nplm.Model(str(path))
    return Reference((path.read_bytes(), neural_answers(model)))


def neural_answers(model):
    out = []
    for s in ["w1 w2 w3", "w5 zz w0", "", "w3"]:
        out.append(model.score(s))
        out.extend((r[0], r[1], r[2]) for r in model.full_scores(s))
    out.append(tuple(model.vocab.word(i) for i in range(len(model.vocab))))
    return out


# ----------------------------------------------------------------------------- ARPA

def check_tables(tables):
    """A successfully read ARPA must be internally consistent and queryable."""
    for k in range(tables.order):
        assert np.isfinite(tables.logprob[k]).all(), "NaN/inf probability accepted"
        assert np.isfinite(tables.backoff[k]).all(), "NaN/inf back-off accepted"
        ids = tables.ids[k]
        assert ids.shape == (tables.counts[k], k + 1)
        assert ((ids >= 0) & (ids < len(tables.vocab))).all()
    data = outcome(backoff.from_tables, tables, messages=io.StringIO())
    if not isinstance(data, Exception):
        # Scoring through the kernels must not crash on whatever the file held.
        for _s in SENTENCES:
            data.core.state_for([1, 2])


@FUZZ
@given(muts=mutations, comp=st.sampled_from(sorted(COMPRESS)))
def test_fuzz_arpa(work, toy_arpa_bytes, muts, comp):
    path = work / f"fuzz.arpa.{comp}"
    path.write_bytes(COMPRESS[comp](mutate(toy_arpa_bytes, muts)))
    got = outcome(arpa.read_arpa, path)
    if not isinstance(got, Exception):
        check_tables(got)


@FUZZ
@given(muts=mutations)
def test_fuzz_compressed_stream_bytes(work, toy_arpa_bytes, muts):
    """Damage inside the compressed bytes themselves (CRCs, block headers)."""
    path = work / "fuzz-stream.arpa.gz"
    raw = gzip.compress(toy_arpa_bytes)
    path.write_bytes(raw[:10] + mutate(raw[10:], muts))
    got = outcome(arpa.read_arpa, path)
    if not isinstance(got, Exception):
        check_tables(got)


header_counts = st.lists(st.sampled_from([0, 1, 2, 71, 151, 197, 2**31 - 1, 2**31, 2**32 + 5, 2**62,
                                          10**18, 10**30]), min_size=1, max_size=4)


@FUZZ
@given(counts=header_counts, comp=st.sampled_from(["plain", "gz"]), negative=st.booleans())
def test_fuzz_arpa_header_counts(work, toy_arpa_bytes, counts, comp, negative):
    """Huge, negative and inconsistent 'ngram N=count' lines are refused before
    anything of their size is allocated (the address-space cap would catch it)."""
    body = toy_arpa_bytes.split(b"\n\n", 1)[1]
    lines = [b"\\data\\"] + [b"ngram %d=%s%d" % (k + 1, b"-" if negative and k == len(counts) - 1 else b"", c)
                             for k, c in enumerate(counts)]
    path = work / f"counts.arpa.{comp}"
    path.write_bytes(COMPRESS[comp](b"\n".join(lines) + b"\n\n" + body))
    got = outcome(arpa.read_arpa, path)
    if not isinstance(got, Exception):
        assert list(got.counts) == counts and counts == [71, 151, 197]
        check_tables(got)


# ----------------------------------------------------------------------------- nplm binaries

def _fixed_header(raw):
    return container._FIXED.unpack(raw[:container._FIXED.size])


def _rewrite_header(raw, meta, fix_total=True):
    """Replace the JSON header of a container image by ``meta`` with a correct crc,
    keeping the data region where it was when the new header fits in the same
    padded space (so the validation logic, not the crc, must catch the damage)."""
    magic, version, _, hlen, total = _fixed_header(raw)
    header = json.dumps(meta, separators=(",", ":")).encode()
    start = container._FIXED.size
    old_end = start + hlen + container._pad(start + hlen)
    if len(header) <= old_end - start:
        body = header + b"\0" * (old_end - start - len(header))
        image = raw[:start] + body + raw[old_end:]
        hlen_new = len(header)
    else:
        image = raw[:start] + header + raw[start + hlen:]
        hlen_new = len(header)
    total = len(image) if fix_total else total
    return container._FIXED.pack(magic, version, zlib.crc32(header), hlen_new, total) + image[start:]


HOSTILE_INTS = [-1, 0, 1, 3, 63, 64, 2**31, 2**32 - 1, 2**40, 2**63 - 1, 2**64, -2**63, 10**30]


def _json_paths(obj, prefix=()):
    """Every (path, value) leaf of a JSON document."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _json_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _json_paths(v, prefix + (i,))
    yield prefix, obj


def _set(obj, path, value):
    if not path:
        return value
    for p in path[:-1]:
        obj = obj[p]
    obj[path[-1]] = value
    return None


def _header_meta(raw):
    """The JSON header of a container image."""
    hlen = _fixed_header(raw)[3]
    return json.loads(raw[container._FIXED.size:container._FIXED.size + hlen])


def _apply_edits(meta, edits):
    """Each (index, value) edit replaces the index-th leaf (modulo the leaf count) of the
    JSON document; returns the edited document (the root itself may be replaced)."""
    for index, value in edits:
        leaves = list(_json_paths(meta))
        path, _ = leaves[index % len(leaves)]
        replaced = _set(meta, path, copy.deepcopy(value))
        if replaced is not None:
            meta = replaced
    return meta


json_edit = st.tuples(st.integers(0, 1 << 20),
                      st.one_of(st.sampled_from(HOSTILE_INTS),
                                st.sampled_from([None, "", "<f4", "|O", "<f16", [], {}, [-1], [2**40, 2**40],
                                                 1.5, float("nan"), True, "x" * 1000])))


def binary_case(tmp, raw, reference, answer_fn, muts=None, edits=None, fixed=None):
    """Write a damaged binary image and check the load outcome (see module docstring)."""
    image = raw
    if fixed is not None:
        field, value = fixed
        parts = list(_fixed_header(raw))
        parts[field] = value
        try:
            image = container._FIXED.pack(*parts) + raw[container._FIXED.size:]
        except struct.error:
            return
    if edits:
        image = _rewrite_header(raw, _apply_edits(_header_meta(raw), edits))
    if muts:
        image = mutate(image, muts)
    path = tmp / "damaged.nplm"
    path.write_bytes(image)
    for method in (nplm.LoadMethod.LAZY, nplm.LoadMethod.POPULATE_OR_READ):
        config = nplm.Config()
        config.load_method = method
        config.show_progress = False
        config.arpa_complain = nplm.ARPALoadComplain.NONE
        model = outcome(nplm.Model, str(path), config)
        if isinstance(model, Exception):
            assert isinstance(model, nplm.ModelLoadError), type(model)
            continue
        got = outcome(answer_fn, model)
        if image == raw:
            same_answers(got, reference)
            continue
        corrupt = outcome(lambda: container.read(path).verify())
        if isinstance(corrupt, FormatError):
            continue        # detectable: the checksums say so
        if edits or fixed:
            continue        # a consistent, re-checksummed file: any clean answer is fine
        assert not isinstance(got, Exception), got
        same_answers(got, reference)
        del model


@FUZZ
@given(muts=mutations)
def test_fuzz_backoff_binary_bytes(work, backoff_binary, muts):
    raw, reference = backoff_binary
    binary_case(work, raw, reference, answers, muts=muts)


@FUZZ
@given(edits=st.lists(json_edit, min_size=1, max_size=3))
def test_fuzz_backoff_binary_header_fields(work, backoff_binary, edits):
    """Hostile sizes, offsets, shapes, dtypes, orders and ids in a header whose crc
    is correct: validated against the file size before anything is mapped."""
    raw, reference = backoff_binary
    binary_case(work, raw, reference, answers, edits=edits)


@FUZZ
@given(field=st.sampled_from([1, 3, 4]), value=st.sampled_from([0, 1, 2, 2**31, 2**32 - 1, 2**63, 2**64 - 1]))
def test_fuzz_binary_fixed_header(work, backoff_binary, field, value):
    raw, reference = backoff_binary
    binary_case(work, raw, reference, answers, fixed=(field, value))


@FUZZ
@given(muts=mutations)
def test_fuzz_neural_binary_bytes(work, neural_binary, muts):
    raw, reference = neural_binary
    binary_case(work, raw, reference, neural_answers, muts=muts)


@FUZZ
@given(edits=st.lists(json_edit, min_size=1, max_size=3))
def test_fuzz_neural_binary_header_fields(work, neural_binary, edits):
    raw, reference = neural_binary
    binary_case(work, raw, reference, neural_answers, edits=edits)


@FUZZ
@given(name=st.sampled_from(["uni", "vocab_offsets", "vocab_vals", "vocab_keys", "vocab_blob", "mid2",
                             "longest"]),
       at=st.floats(0, 1), value=st.binary(min_size=1, max_size=8))
def test_fuzz_backoff_payload_with_valid_checksums(work, backoff_binary, name, at, value):
    """A file whose arrays were altered *and* re-checksummed (a crafted file): it
    loads or is refused cleanly, and queries never crash or read out of bounds."""
    raw, _ = backoff_binary
    c = container.read(_write(work / "orig.nplm", raw))
    arrays = {k: np.array(v) for k, v in c.arrays.items()}
    buf = bytearray(arrays[name].tobytes())
    if not buf:
        return
    p = min(int(at * len(buf)), len(buf) - 1)
    buf[p:p + len(value)] = value[:len(buf) - p]
    arrays[name] = np.frombuffer(bytes(buf), dtype=arrays[name].dtype).reshape(arrays[name].shape)
    config = dict(c.config)
    del c
    container.write(work / "crafted.nplm", "backoff", config, arrays)
    model = outcome(nplm.Model, str(work / "crafted.nplm"))
    if not isinstance(model, Exception):
        outcome(answers, model)


def _write(path, raw):
    path.write_bytes(raw)
    return path


# ----------------------------------------------------------------------------- ISI NPLM text

@pytest.fixture(scope="module")
def isi_bytes(work):
    from nplm.neural import isi

    from helpers import make_net
    net = make_net("softmax-full-2", order=3)
    path = work / "model.isi"
    isi.write_isi(isi.from_neural(net), path)
    return path.read_bytes()


@FUZZ
@given(muts=mutations, comp=st.sampled_from(["plain", "gz"]))
def test_fuzz_isi_text(work, isi_bytes, muts, comp):
    from nplm.neural import isi
    path = work / "fuzz.isi"
    path.write_bytes(COMPRESS[comp](mutate(isi_bytes, muts)))
    got = outcome(isi.read_isi, path)
    if isinstance(got, Exception):
        return
    for name, a in got.arrays.items():
        assert np.isfinite(a).all(), f"non-finite {name} accepted"
    outcome(isi.to_neural, got)


# ----------------------------------------------------------------------------- interpolation spec

@pytest.fixture(scope="module")
def spec_bytes(work, backoff_binary):
    _write(work / "a.nplm", backoff_binary[0])
    shutil.copy(TOY_ARPA, work / "b.arpa")
    m = nplm.interpolate([str(work / "a.nplm"), str(work / "b.arpa")], [0.25, 0.75])
    m.save(work / "mix.json")
    return (work / "mix.json").read_bytes()


@FUZZ
@given(muts=mutations)
def test_fuzz_interpolation_spec(work, spec_bytes, muts):
    path = work / "fuzz-mix.json"
    path.write_bytes(mutate(spec_bytes, muts))
    config = nplm.Config()
    config.arpa_complain = nplm.ARPALoadComplain.NONE
    config.show_progress = False
    model = outcome(nplm.Model, str(path), config)
    if not isinstance(model, Exception):
        got = outcome(answers, model)
        assert not isinstance(got, Exception), got


@FUZZ
@given(edits=st.lists(json_edit, min_size=1, max_size=3))
def test_fuzz_interpolation_spec_fields(work, spec_bytes, edits):
    meta = _apply_edits(json.loads(spec_bytes), edits)
    target = work / "fuzz-fields.json"
    target.write_text(json.dumps(meta))
    config = nplm.Config()
    config.arpa_complain = nplm.ARPALoadComplain.NONE
    config.show_progress = False
    model = outcome(nplm.Model, str(target), config)
    if not isinstance(model, Exception):
        outcome(answers, model)


# ----------------------------------------------------------------------------- training text

@pytest.fixture(scope="module")
def text_bytes():
    return TOY_TEXT.read_bytes()


@FUZZ
@given(muts=mutations, comp=st.sampled_from(sorted(COMPRESS)))
def test_fuzz_training_text(work, text_bytes, muts, comp):
    """The neural trainer's corpus reader (vocabulary, examples)."""
    from nplm.neural.train import Corpus
    path = work / f"train.txt.{comp}"
    path.write_bytes(COMPRESS[comp](mutate(text_bytes, muts)))
    got = outcome(Corpus, str(path), None, 3)
    if not isinstance(got, Exception):
        assert got.train[0].shape[1] == 2
        assert ((got.train[0] >= 0) & (got.train[0] < len(got.vocab))).all()


@FUZZ
@given(muts=mutations, comp=st.sampled_from(sorted(COMPRESS)))
def test_fuzz_estimation_text(work, text_bytes, muts, comp):
    """Kneser-Ney estimation input: a clean result (then a valid model) or error."""
    path = work / f"est.txt.{comp}"
    path.write_bytes(COMPRESS[comp](mutate(text_bytes, muts)))
    tables = outcome(nplm.estimate, str(path), 3, discount_fallback=True, progress=False)
    if not isinstance(tables, Exception):
        check_tables(tables)


# ----------------------------------------------------------------------------- neural payloads, quantised files

def _crafted(work, raw, name_pick, at, value, kind="neural"):
    """Rewrite one array of a container with ``value`` spliced in and fresh checksums."""
    c = container.read(_write(work / "orig-n.nplm", raw))
    names = sorted(c.arrays)
    name = names[name_pick % len(names)]
    arrays = {k: np.array(v) for k, v in c.arrays.items()}
    buf = bytearray(arrays[name].tobytes())
    if buf:
        p = min(int(at * len(buf)), len(buf) - 1)
        buf[p:p + len(value)] = value[:len(buf) - p]
        arrays[name] = np.frombuffer(bytes(buf), dtype=arrays[name].dtype).reshape(arrays[name].shape)
    config = dict(c.config)
    del c
    path = work / "crafted-n.nplm"
    container.write(path, kind, config, arrays)
    return path


@pytest.fixture(scope="module", params=["class-full-1", "tree-diag-1"])
def structured_net(work, request):
    from helpers import make_net
    path = work / f"{request.param}.nplm"
    make_net(request.param, order=3).save(path)
    return Reference((path.read_bytes(), None))


@FUZZ
@given(pick=st.integers(0, 1000), at=st.floats(0, 1),
       value=st.sampled_from([b"\xff\xff\xff\xff", b"\x00\x00\x00\x80", b"\x7f\xff\xff\xff", b"\x01",
                              b"\xff", b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f"]))
def test_fuzz_neural_structures_with_valid_checksums(work, structured_net, pick, at, value):
    """Class layouts and Huffman trees index arrays in the kernels: a crafted
    file with out-of-range entries (checksums correct) must be refused, and one
    that loads must answer without crashing."""
    path = _crafted(work, structured_net[0], pick, at, value)
    model = outcome(nplm.Model, str(path))
    if not isinstance(model, Exception):
        outcome(neural_answers, model)


@pytest.fixture(scope="module", params=["int8", "float16"])
def quantised(work, request):
    from nplm.neural import quantized_files as quantize

    from helpers import make_net
    src = work / "q-src.nplm"
    make_net("softmax-full-2", order=3).save(src)
    dst = work / f"q-{request.param}.nplm"
    quantize.quantize_file(src, dst, request.param)
    return Reference((dst.read_bytes(), None))


@FUZZ
@given(muts=mutations, edits=st.lists(json_edit, max_size=2))
def test_fuzz_quantised_neural(work, quantised, muts, edits):
    from nplm.neural.network import NeuralNet
    raw = quantised[0]
    image = raw
    if edits:
        image = _rewrite_header(raw, _apply_edits(_header_meta(raw), edits))
    path = work / "q-damaged.nplm"
    path.write_bytes(mutate(image, muts))
    net = outcome(NeuralNet.load, path)
    if not isinstance(net, Exception):
        ctx = np.zeros((2, net.order - 1), np.int32)
        outcome(net.log_prob, ctx, np.array([1, 2], np.int32))


# ----------------------------------------------------------------------------- every config entry, exhaustively

CONFIG_VALUES = [None, -1, 0, 1, 2**31, 2**64, 1.5, float("nan"), True, "", "x", [], [1], [-1, 2**40], {},
                 {"dtype": "int8"}]


def _config_cases(raw):
    meta = _header_meta(raw)
    paths = [p for p, _ in _json_paths(meta["config"])]
    return meta, [("config",) + p for p in paths]


@pytest.mark.parametrize("which", ["backoff", "neural", "int8", "class", "tree"])
def test_every_config_entry_hostile(work, which):
    """Each entry of a binary's config (and the config itself) replaced by each
    hostile value, with a correct header crc: a clean load or a ModelLoadError."""
    from nplm.neural import quantized_files as quantize
    from nplm.neural.network import NeuralNet

    from helpers import make_net
    src = work / f"cfg-{which}.nplm"
    if which == "backoff":
        backoff.build_binary(arpa.read_arpa(TOY_ARPA), src)
    else:
        kind = {"neural": "softmax-full-2", "int8": "softmax-full-2", "class": "class-full-1",
                "tree": "tree-diag-1"}[which]
        make_net(kind, order=3).save(src)
        if which == "int8":
            quantize.quantize_file(src, work / "cfg-q.nplm", "int8")
            src = work / "cfg-q.nplm"
    raw = src.read_bytes()
    meta, paths = _config_cases(raw)
    target = work / f"cfg-{which}-damaged.nplm"
    for path in paths:
        for value in CONFIG_VALUES:
            m = copy.deepcopy(meta)
            _set(m, path, copy.deepcopy(value))
            target.write_bytes(_rewrite_header(raw, m))
            loader = NeuralNet.load if which == "int8" else (lambda p: nplm.Model(str(p)))
            got = outcome(loader, target)
            if not isinstance(got, Exception) and which != "int8":
                outcome(answers if which == "backoff" else neural_answers, got)


# ----------------------------------------------------------------------------- damaged compressed streams

def _text_readers():
    from nplm.neural import isi
    from nplm.neural.train import Corpus
    from nplm.neural.vocab import read_sentences
    return {
        "arpa": (TOY_ARPA, arpa.read_arpa),
        "training": (TOY_TEXT, lambda p: Corpus(str(p), None, 3)),
        "sentences": (TOY_TEXT, read_sentences),
        "estimation": (TOY_TEXT, lambda p: nplm.estimate(str(p), 3, discount_fallback=True, progress=False)),
        "isi": (None, isi.read_isi),
    }


@FUZZ
@given(reader=st.sampled_from(["arpa", "training", "sentences", "estimation", "isi"]),
       comp=st.sampled_from(["gz", "bz2", "xz"]), muts=mutations)
def test_fuzz_damaged_compression_every_text_reader(work, isi_bytes, reader, comp, muts):
    """Truncated or corrupt gzip/bz2/xz streams: a FormatError naming the file
    (CompressedDataError), never a bare EOFError / zlib.error / LZMAError."""
    source, fn = _text_readers()[reader]
    raw = COMPRESS[comp](isi_bytes if source is None else source.read_bytes())
    path = work / f"damaged-{reader}.{comp}"
    path.write_bytes(raw[:6] + mutate(raw[6:], muts))
    got = outcome(fn, path)
    if isinstance(got, Exception) and not isinstance(got, FormatError):
        assert not isinstance(got, OSError) or got.errno is not None, got
    if isinstance(got, FormatError):
        assert str(path) in str(got)


# ----------------------------------------------------------------------------- neural fallback normaliser tables

@pytest.fixture(scope="module")
def fallback_binary(work):
    from nplm.neural import query as neural_model

    from helpers import make_net
    path = work / "fb.nplm"
    make_net("softmax-full-2", order=3).save(path)
    rng = np.random.default_rng(2)
    text = work / "fb.txt"
    text.write_text("\n".join(" ".join(f"w{i}" for i in rng.integers(0, 37, size=8)) for _ in range(200)))
    neural_model.precompute(path, text, min_count=2, progress=False)
    return Reference((path.read_bytes(), None))


@FUZZ
@given(pick=st.integers(0, 1000), at=st.floats(0, 1),
       value=st.sampled_from([b"\xff" * 8, b"\x00" * 8, b"\x01", b"\x00\x00\xc0\x7f", b"\x00\x00\x80\xff"]))
def test_fuzz_fallback_tables_with_valid_checksums(work, fallback_binary, pick, at, value):
    """Crafted fallback normaliser tables (keys, values) with correct checksums:
    refused or answered without a crash; probing stays bounded."""
    path = _crafted(work, fallback_binary[0], pick, at, value)
    model = outcome(nplm.Model, str(path), normalization="fallback")
    if not isinstance(model, Exception):
        outcome(neural_answers, model)


@FUZZ
@given(muts=mutations)
def test_fuzz_fallback_binary_bytes(work, fallback_binary, muts):
    path = work / "fb-damaged.nplm"
    path.write_bytes(mutate(fallback_binary[0], muts))
    model = outcome(nplm.Model, str(path), normalization="fallback")
    if not isinstance(model, Exception):
        outcome(neural_answers, model)


# ----------------------------------------------------------------------------- nplm verify

def test_verify_command_reports_payload_damage(work, backoff_binary, neural_binary):
    """Loading does not read array payloads (mmap), so ``nplm verify`` is how a
    flipped bit inside an array is found: every damaged copy fails it (or is
    byte-identical in content, i.e. the flip hit padding) and the sound file passes."""
    import subprocess
    import sys
    paths = []
    for label, (raw, _) in (("b", backoff_binary), ("n", neural_binary)):
        good = _write(work / f"verify-{label}.nplm", raw)
        paths.append((good, True))
        rng = np.random.default_rng(1)
        for k, pos in enumerate(rng.integers(container._FIXED.size, len(raw), size=6)):
            bad = bytearray(raw)
            bad[pos] ^= 1 << int(rng.integers(8))
            paths.append((_write(work / f"verify-{label}{k}.nplm", bytes(bad)), False))
    r = subprocess.run([sys.executable, "-m", "nplm", "verify", *(str(p) for p, _ in paths)],
                       capture_output=True, cwd=ROOT, timeout=120)
    assert b"Traceback" not in r.stderr, r.stderr.decode()
    ok = {line.split(": ")[0] for line in r.stdout.decode().splitlines() if line.endswith("OK")}
    damaged = {line.split(": ")[0] for line in r.stderr.decode().splitlines() if ": DAMAGED: " in line}
    assert ok | damaged == {str(p) for p, _ in paths} and not ok & damaged
    assert r.returncode == (1 if damaged else 0)
    for path, sound in paths:
        if sound:
            assert str(path) in ok
        elif str(path) in ok:
            # only a flip in zero padding between arrays can pass: same arrays
            a, b = container.read(path), container.read(work / f"verify-{path.name[7]}.nplm")
            assert a.arrays.keys() == b.arrays.keys()
            for name in a.arrays:
                assert a.arrays[name].tobytes() == b.arrays[name].tobytes(), name
    assert len(damaged) >= 8


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "/dev/null", "/", "/nonexistent/model"])
def test_special_files_as_models(path):
    """Endless, random, empty, directory, missing: a ModelLoadError naming the path
    (an endless file stops at the ARPA reader's line-length limit)."""
    config = nplm.Config()
    config.show_progress = False
    config.arpa_complain = nplm.ARPALoadComplain.NONE
    with watchdog(), pytest.raises(nplm.ModelLoadError, match=re.escape(path)):
        nplm.Model(path, config)


# ----------------------------------------------------------------------------- KenLM binaries

KENLM_FILES = ["ptb5k.o3.probing-p1.2", "ptb5k.o3.trie-a22q8b8", "ptb5k.o3.trie-q4b6", "ptb5k.o3.trie-novocab"]
KENLM_DIR = ROOT.parent / "shared" / "reference" / "kenlm-binary"

# Besides the generic mutations, edits aimed at the header and the small structures
# right after it (vocabulary header, quantisation and array-compression headers,
# unigram pointers), where one byte changes every offset that follows.
kenlm_mutation = st.one_of(
    mutation,
    st.tuples(st.just("at"), st.integers(0, 1023), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("bit"), st.integers(0, 1023), st.integers(0, 7)),
)


def mutate_kenlm(data, muts):
    for m in muts:
        if m[0] == "at" and m[1] < len(data):
            data = data[:m[1]] + m[2] + data[m[1] + len(m[2]):]
        elif m[0] == "bit" and m[1] < len(data):
            data = data[:m[1]] + bytes([data[m[1]] ^ (1 << m[2])]) + data[m[1] + 1:]
        elif m[0] not in ("at", "bit"):
            data = mutate(data, [m])
    return data


@pytest.fixture(scope="module")
def kenlm_raw():
    if not KENLM_DIR.is_dir():
        pytest.skip("../shared/reference/kenlm-binary is absent")
    return {name: Reference((lzma.decompress((KENLM_DIR / f"{name}.bin.xz").read_bytes()), None))
            for name in KENLM_FILES}


def kenlm_answers(path):
    """Load a (possibly damaged) KenLM binary and ask everything of it."""
    model = nplm.Model(str(path))
    out = [model.score(s) for s in SENTENCES]
    out += [tuple(r) for s in SENTENCES for r in model.full_scores(s)]
    out.append(tuple(model.score_sentences(SENTENCES * 3)))
    state, nxt = nplm.State(), nplm.State()
    model.BeginSentenceWrite(state)
    for w in "the company said it".split():
        out.append(model.BaseScore(state, w, nxt))
        state, nxt = nxt, state
    out.append(float(model.log10_distribution(state).sum()))
    out.append(tuple(model.vocab.words()))     # ValueError for a file without its words
    return out


@FUZZ
@given(name=st.sampled_from(KENLM_FILES), muts=st.lists(kenlm_mutation, min_size=1, max_size=4))
def test_fuzz_kenlm_binary(work, kenlm_raw, name, muts):
    """A damaged KenLM binary loads and answers (KenLM's format has no checksums, so
    damage in the tables changes numbers undetected) or fails with a clear error;
    never a crash, a hang or a runaway allocation."""
    raw, _ = kenlm_raw[name]
    path = _write(work / f"fuzz-{name}.bin", mutate_kenlm(raw, muts))
    result = outcome(kenlm_answers, path)
    if isinstance(result, Exception):
        assert str(path) in str(result) or "vocabulary strings" in str(result), result


# Damage aimed at a KenLM binary's structures: a bit of its header or vocabulary
# header flipped; 4 KB of the file copied over its trie arrays (unigrams, middle and
# longest orders); hostile floats or copied bytes in its quantisation tables; its
# array-compression header and offsets.  The rule: the load refuses the file, or
# every answer is a finite log10 probability at most 0.  (-inf is not among the
# hostile values: KenLM stores an ARPA's -inf as it is, and answers it.)
STRUCTURE_FILES = ["ptb5k.o3.trie", "ptb5k.o3.trie-a22q8b8", "ptb5k.o3.trie-q4b6", "ptb5k.o3.probing-p1.2"]
HOSTILE_FLOATS = [float("nan"), float("inf"), 5.0, 1e30, -1e30, 0.25, 3.4e38]
structure_mutation = st.tuples(st.sampled_from(["header", "vocab header", "copy", "quant", "quant copy",
                                                "bhiksha"]),
                               st.floats(0, 1), st.floats(0, 1), st.integers(0, 1 << 30))


def _kenlm_regions(raw):
    from nplm.backoff.kenlm import format as fmt
    header = fmt.parse_header(raw[:4096], len(raw))
    lay = fmt.layout(header, lambda o, n: raw[o:o + n])
    arrays = [(lay.unigram.offset, lay.unigram.end)] + [(m.offset, m.end) for m in lay.middle]
    arrays.append((lay.longest.offset, lay.longest.end))
    vocab = (lay.vocab.offset, lay.vocab.offset + 8) if header.is_trie else (lay.vocab_header.offset,
                                                                           lay.vocab_header.end)
    quant = (lay.quant.offset + 8, lay.quant.offset + lay.quant.size) if header.is_trie and lay.quant else None
    bhiksha = (lay.middle[0].offset, lay.middle[0].base) if header.is_trie and lay.middle[0].array else None
    return {"header": (0, header.size), "vocab header": vocab, "copy": arrays, "quant": quant, "bhiksha": bhiksha}


def mutate_structure(raw, regions, muts):
    data = bytearray(raw)
    for kind, a, b, n in muts:
        region = regions[kind.split()[0] if kind.startswith("quant") else kind]
        if region is None:
            continue
        if kind == "copy":
            region = region[n % len(region)]
        lo, hi = region
        at = lo + int(a * (hi - lo - 1))
        if kind in ("copy", "quant copy"):
            src = int(b * (len(raw) - 4096))
            size = min(4096, hi - at)
            data[at:at + size] = raw[src:src + size]
        elif kind == "quant":
            at = lo + 4 * int(a * ((hi - lo) // 4 - 1))
            data[at:at + 4] = struct.pack("<f", HOSTILE_FLOATS[n % len(HOSTILE_FLOATS)])
        else:
            data[at] ^= 1 << (n % 8)
    return bytes(data)


def kenlm_log10_probabilities(path, method):
    """Every log10 probability a client can ask of the file loaded with ``method``."""
    config = nplm.Config()
    config.show_progress = False
    config.arpa_complain = nplm.ARPALoadComplain.NONE
    config.load_method = method
    model = nplm.Model(str(path), config)
    out = [model.score(s) for s in SENTENCES] + [r[0] for s in SENTENCES for r in model.full_scores(s)]
    out += list(model.score_sentences(SENTENCES * 2))
    state, nxt = nplm.State(), nplm.State()
    model.BeginSentenceWrite(state)
    for w in "the company said it".split():
        out.append(model.BaseScore(state, w, nxt))
        state, nxt = nxt, state
    return np.concatenate([np.asarray(out, dtype=np.float64), model.log10_distribution(state)])


@settings(FUZZ, max_examples=_LONG or 1000)     # about 5 s
@given(name=st.sampled_from(STRUCTURE_FILES), muts=st.lists(structure_mutation, min_size=1, max_size=3),
       lazy=st.booleans())
def test_fuzz_kenlm_structures_never_score_absurdly(work, kenlm_raw_structures, name, muts, lazy):
    """Never a NaN, infinite or positive log10 probability, never a crash: a load that
    reads the file checks every record; a LAZY one refuses an absurd score."""
    raw, regions = kenlm_raw_structures[name]
    path = _write(work / f"structure-{name}.bin", mutate_structure(raw, regions, muts))
    method = nplm.LoadMethod.LAZY if lazy else nplm.LoadMethod.POPULATE_OR_READ
    got = outcome(kenlm_log10_probabilities, path, method)
    if isinstance(got, Exception):
        assert str(path) in str(got), got
    else:
        assert np.isfinite(got).all() and (got <= 0).all(), got[~(np.isfinite(got) & (got <= 0))][:5]


@pytest.fixture(scope="module")
def kenlm_raw_structures():
    if not KENLM_DIR.is_dir():
        pytest.skip("../shared/reference/kenlm-binary is absent")
    out = {}
    for name in STRUCTURE_FILES:
        raw = lzma.decompress((KENLM_DIR / f"{name}.bin.xz").read_bytes())
        out[name] = Reference((raw, _kenlm_regions(raw)))
    return out
