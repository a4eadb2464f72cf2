"""ARPA reader and writer: lmplz references, round trips, SRILM conventions,
float formatting/parsing, and hostile input."""
import bz2
import gzip
import io
import lzma
import os
from fractions import Fraction

import numpy as np
import pytest

from nplm.backoff import _arpa, arpa
from nplm.backoff.arpa import read_arpa, write_arpa
from nplm.backoff.tables import NGramTables
from nplm.errors import FormatError

from helpers import ROOT, SHARED

REFERENCE = SHARED / "reference"
REFERENCES = sorted(p.name for p in REFERENCE.glob("*.arpa.xz")) if REFERENCE.is_dir() else []


@pytest.fixture
def reference():
    if not REFERENCE.is_dir():
        pytest.skip("../shared/reference (lmplz ARPA files) is absent")
    return REFERENCE


def _text(name):
    with lzma.open(REFERENCE / name, "rb") as f:
        return f.read()


def assert_same_tables(a, b, skip_logprob=()):
    assert a.vocab == b.vocab
    assert a.counts == b.counts
    for k in range(a.order):
        assert a.ids[k].dtype == np.int32 and a.ids[k].shape == (a.counts[k], k + 1)
        np.testing.assert_array_equal(a.ids[k], b.ids[k])
        pa, pb = a.logprob[k].copy(), b.logprob[k].copy()
        for order, i in skip_logprob:
            if order == k:
                pa[i] = pb[i] = 0
        # bit-identical, including the sign of zero
        assert pa.view(np.uint32).tolist() == pb.view(np.uint32).tolist()
        assert a.backoff[k].view(np.uint32).tolist() == b.backoff[k].view(np.uint32).tolist()


# --- a pure-Python reference parser (lmplz-style input only) -----------------

def python_parse(raw):
    """{order: {ngram tuple: (prob, backoff)}} and the unigram order, by plain
    string handling; floats via Python's correctly rounded float() then float32."""
    lines = raw.decode("utf-8").split("\n")
    assert lines[0] == "\\data\\"
    counts, i = [], 1
    while lines[i]:
        counts.append(int(lines[i].split("=")[1]))
        i += 1
    result, unigrams, order = {}, [], 0
    for line in lines[i:]:
        if line.startswith("\\") and line.endswith("-grams:"):
            order = int(line[1:-7])
            result[order] = {}
        elif line and not line.startswith("\\"):
            fields = line.split("\t")
            words = tuple(fields[1].split(" "))
            assert len(words) == order
            backoff = np.float32(float(fields[2])) if len(fields) > 2 else np.float32(0)
            result[order][words] = (np.float32(float(fields[0])), backoff)
            if order == 1:
                unigrams.append(words[0])
    assert [len(result[k + 1]) for k in range(len(counts))] == counts
    return result, unigrams


# The pure-Python parser is slow; the biggest references are covered by the
# byte-identical write-back test instead.
@pytest.mark.parametrize("name", [n for n in REFERENCES if ".o5." not in n])
def test_reference_agrees_with_python_parser(reference, name):
    raw = _text(name)
    tables = read_arpa(reference / name)
    expected, unigrams = python_parse(raw)
    assert tables.vocab == unigrams
    assert tables.source == str(reference / name)
    for k in range(tables.order):
        got = {tuple(tables.vocab[w] for w in row): (p, b)
               for row, p, b in zip(tables.ids[k].tolist(), tables.logprob[k], tables.backoff[k])}
        assert got.keys() == expected[k + 1].keys()
        for ngram, (p, b) in expected[k + 1].items():
            assert got[ngram][0] == p and got[ngram][1] == b, ngram
    # first_line: the line of the first entry of each order in the file
    lines = raw.split(b"\n")
    for k in range(tables.order):
        assert lines[lines.index(b"\\%d-grams:" % (k + 1)) + 1] == lines[tables.first_line[k] - 1]


@pytest.mark.parametrize("name", REFERENCES)
def test_reference_written_back_byte_identical(reference, name):
    """The writer's floats are lmplz's (shortest round-trip float32), so the
    text written for a reference is the reference, byte for byte."""
    tables = read_arpa(reference / name)
    out = io.BytesIO()
    write_arpa(tables, out)
    assert out.getvalue() == _text(name)
    again = read_arpa_bytes(out.getvalue())
    assert_same_tables(tables, again)


def read_arpa_bytes(data, tmp=None):
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".arpa", delete=False) as f:
        f.write(data)
    try:
        return read_arpa(f.name)
    finally:
        os.unlink(f.name)


@pytest.mark.parametrize("ext,magic", [(".arpa", b"\\data\\"), (".arpa.gz", b"\x1f\x8b"),
                                       (".arpa.bz2", b"BZh"), (".arpa.xz", b"\xfd7zXZ")])
def test_compressions_round_trip(reference, tmp_path, ext, magic):
    tables = read_arpa(reference / "tiny200.o4.discount-fallback.arpa.xz")
    path = tmp_path / ("model" + ext)
    write_arpa(tables, path)
    assert path.read_bytes().startswith(magic)
    assert_same_tables(tables, read_arpa(path))
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".nplm-tmp")]


def test_small_chunks_and_growth_give_the_same_tables(reference, tmp_path, monkeypatch):
    """Lines split across read chunks, and arrays grown from a small start (as
    for compressed input, whose header counts cannot be checked up front)."""
    name = "ptb5k.o3.arpa.xz"
    whole = read_arpa(reference / name)
    monkeypatch.setattr(arpa, "CHUNK", 4093)
    monkeypatch.setattr(arpa, "INITIAL_ROWS", 100)
    assert_same_tables(whole, read_arpa(reference / name))
    plain = tmp_path / "m.arpa"
    plain.write_bytes(_text(name))
    assert_same_tables(whole, read_arpa(plain))


@pytest.fixture
def split_small(monkeypatch):
    """Small chunks, each parsed by two threads where possible."""
    monkeypatch.setattr(arpa, "CHUNK", 50_000)
    monkeypatch.setattr(arpa, "SPLIT_BYTES", 1000)
    monkeypatch.setattr(arpa, "SPLIT", True)


def test_two_thread_parsing_matches_one(reference, tmp_path, monkeypatch, split_small):
    name = "ptb5k.o4.arpa.xz"
    split = read_arpa(reference / name)
    monkeypatch.setattr(arpa, "SPLIT", False)
    serial = read_arpa(reference / name)
    assert_same_tables(serial, split)
    assert split.first_line == serial.first_line


def big_section(blank_every=0):
    """An ARPA text with 20 unigrams and 6000 bigrams; optional blank lines."""
    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(17)]
    lines = ["\\data\\", "ngram 1=20", "ngram 2=6000", "", "\\1-grams:"]
    lines += [f"-1.5\t{w}\t-0.25" for w in words] + ["", "\\2-grams:"]
    for i in range(6000):
        lines.append(f"-{1 + i % 7}.{i}\t{words[i % 20]} {words[(i * 7) % 20]}")
        if blank_every and i % blank_every == 0:
            lines.append("")
    return ("\n".join(lines + ["", "\\end\\", ""])).encode()


def test_two_thread_parsing_with_blank_lines(tmp_path, monkeypatch, split_small):
    path = tmp_path / "m.arpa"
    path.write_bytes(big_section(blank_every=3))
    split = read_arpa(path)
    monkeypatch.setattr(arpa, "SPLIT", False)
    assert_same_tables(read_arpa(path), split)
    assert split.logprob[1][5999] == np.float32(-(1 + 5999 % 7) - 0.5999)


@pytest.mark.parametrize("entry", [10, 2999, 3000, 3001, 4500, 5999])
@pytest.mark.parametrize("damage,message", [(b"-1.x", "bad number"), (b"-1\tzz w1", "not seen in the unigrams"),
                                            (b"\\end\\", "ends after")])
def test_two_thread_parsing_error_lines(tmp_path, split_small, entry, damage, message):
    """An error anywhere, in either half, names its own line."""
    lines = big_section().split(b"\n")
    first = lines.index(b"\\2-grams:") + 1
    lines[first + entry] = damage
    path = tmp_path / "bad.arpa"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(FormatError) as info:
        read_arpa(path)
    assert info.value.line == first + entry + 1 and message in str(info.value)


def srilm_style(raw):
    """The same model as SRILM would print it: comment and blank lines before
    \\data\\, no zero back-offs, <s> at -99, CRLF line ends, spaces between the
    probability and the words of higher orders."""
    out = [b"", b"# written by a test", b"#", b""]
    for line in raw.split(b"\n"):
        fields = line.split(b"\t")
        if len(fields) == 3 and fields[2] == b"0":
            line = b"\t".join(fields[:2])
            fields = fields[:2]
        if len(fields) >= 2 and fields[1] == b"<s>":
            line = b"-99\t" + line.split(b"\t", 1)[1]
        elif len(fields) >= 2 and b" " in fields[1]:
            line = fields[0] + b"  " + b"\t".join(fields[1:])
        out.append(line)
    return b"\r\n".join(out)


def test_srilm_conventions_give_the_same_tables(reference, tmp_path):
    name = "tiny200.o4.discount-fallback.arpa.xz"
    raw = _text(name)
    lmplz = read_arpa(reference / name)
    path = tmp_path / "srilm.arpa"
    path.write_bytes(srilm_style(raw))
    srilm = read_arpa(path)
    s = lmplz.vocab.index("<s>")
    assert srilm.logprob[0][s] == -99
    assert_same_tables(lmplz, srilm, skip_logprob=[(0, s)])
    assert srilm.comments == ["written by a test", ""]


def test_comments_are_written_and_read_back():
    tables = tiny_tables()
    tables.comments = ["made by hand", "second line"]
    out = io.BytesIO()
    write_arpa(tables, out)
    assert out.getvalue().startswith(b"# made by hand\n# second line\n\\data\\\n")
    again = read_arpa_bytes(out.getvalue())
    assert again.comments == tables.comments
    assert_same_tables(tables, again)


def tiny_tables():
    vocab = ["<unk>", "<s>", "</s>", "a", "b"]
    return NGramTables(
        vocab=vocab,
        ids=[np.arange(5, dtype=np.int32)[:, None],
             np.array([[1, 3], [3, 4], [4, 2]], dtype=np.int32)],
        logprob=[np.array([-2, 0, -1, -0.5, -0.75], dtype=np.float32),
                 np.array([-0.25, -1e-7, -3.5e20], dtype=np.float32)],
        backoff=[np.array([0, -0.5, 0, -0.0, 0.125], dtype=np.float32), np.zeros(3, dtype=np.float32)])


def test_tiny_model_text_is_lmplz_layout():
    out = io.BytesIO()
    write_arpa(tiny_tables(), out)
    assert out.getvalue() == (
        b"\\data\\\nngram 1=5\nngram 2=3\n\n\\1-grams:\n-2\t<unk>\t0\n0\t<s>\t-0.5\n-1\t</s>\t0\n"
        b"-0.5\ta\t-0\n-0.75\tb\t0.125\n\n\\2-grams:\n-0.25\t<s> a\n-1e-7\ta b\n"
        b"-350000000000000000000\tb </s>\n\n\\end\\\n")


def test_kenlm_scores_what_we_write_like_the_original(reference, tmp_path):
    """SRILM-style input read and written back lmplz-style: the real kenlm scores
    both files identically."""
    kenlm = pytest.importorskip("kenlm")
    original = tmp_path / "srilm.arpa"
    original.write_bytes(srilm_style(_text("tiny200.o4.discount-fallback.arpa.xz")))
    written = tmp_path / "written.arpa"
    write_arpa(read_arpa(original), written)
    a, b = kenlm.Model(str(original)), kenlm.Model(str(written))
    for sentence in ["the company said", "UNK N years old", "zzz unknown words here", "<s> in <s> the"]:
        assert a.score(sentence) == b.score(sentence)
        assert list(a.full_scores(sentence)) == list(b.full_scores(sentence))


def test_unknown_word_spellings():
    text = (b"\\data\\\nngram 1=4\nngram 2=3\n\n\\1-grams:\n-1\t<unk>\n0\t<s>\t-1\n-1\t</s>\n-1\ta\t-1\n\n"
            b"\\2-grams:\n-1\t<s> <UNK>\n-1\t<unk> </s>\n-1\ta <unk>\n\n\\end\\\n")
    t = read_arpa_bytes(text)
    assert t.ids[1].tolist() == [[1, 0], [0, 2], [3, 0]]
    t = read_arpa_bytes(text.replace(b"\t<unk>\n0", b"\t<UNK>\n0"))
    assert t.vocab[0] == "<UNK>" and t.ids[1].tolist() == [[1, 0], [0, 2], [3, 0]]


# --- floats -------------------------------------------------------------------

def test_format_floats_shortest_and_round_trip():
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2 ** 32, size=100_000, dtype=np.uint64).astype(np.uint32)
    # log-probability and sentence-score ranges, integers and multiples of ten,
    # powers of ten and of two (the bottoms of binades) with their neighbours,
    # across the ranges where the formatter works in exact double arithmetic
    # (about 1e-4 to 2^53) and beyond
    special = np.concatenate([np.arange(-3000, 3000) * 10.0, 10.0 ** np.arange(-12, 20),
                              2.0 ** np.arange(-40, 70), -np.exp(rng.uniform(-14, 45, 50_000)),
                              rng.uniform(-300, 0, 50_000)]).astype(np.float32)
    around = special.view(np.uint32)
    values = np.concatenate([bits.view(np.float32), (-rng.random(50_000) * 10).astype(np.float32),
                             np.arange(-4096, 4096, dtype=np.float32) / np.float32(16),
                             special, (around + 1).view(np.float32), (around - 1).view(np.float32),
                             np.float32([0.0, -0.0, 1e-6, 1e-7, 1e21, 1e20, 3.4028235e38, 1e-45])])
    values = values[np.isfinite(values)]
    for v, s in zip(values, _arpa.format_floats(values)):
        back = np.float32(s)
        assert back.view(np.uint32) == v.view(np.uint32), (v, s)
        # numpy's Dragon4 gives the shortest digits, nearest to v, ties to even
        ref = np.format_float_scientific(v, unique=True, trim="-").lstrip("-")
        mantissa, exponent = ref.split("e")
        digits = s.lstrip("-").split("e")[0].replace(".", "").strip("0") or "0"
        assert digits == (mantissa.replace(".", "").rstrip("0") or "0"), (v, s, ref)
        # double-conversion's layout: exponential outside [1e-6, 1e21)
        assert ("e" in s) == (v != 0 and not (-6 <= int(exponent) < 21)), (v, s)


def exact_float32(text):
    """The float32 nearest to decimal ``text`` (ties to even), exactly."""
    x = Fraction(text)
    f = np.float32(float(x))
    best = None
    with np.errstate(over="ignore"):
        neighbours = (np.nextafter(f, np.float32(-np.inf)), f, np.nextafter(f, np.float32(np.inf)))
    for c in neighbours:
        if not np.isfinite(c):
            continue
        d = abs(Fraction(float(c)) - x)
        if best is None or d < best[0] or (d == best[0] and int(c.view(np.uint32)) % 2 == 0):
            best = (d, c)
    if best[1] == 0 and text.startswith("-"):
        return np.float32(-0.0)
    return best[1]


def test_parse_floats_correctly_rounded():
    rng = np.random.default_rng(7)
    tokens = ["-4.6064444", "0", "-0", "-99", "1e-7", "+2.5E+3", ".5", "7.", "-0.000000000000000000000123456789",
              "123456789012345678901234567890", "0.1", "3.4028235e38"]
    # float32 midpoints written out exactly, and numbers just beside them:
    # where rounding through double can go wrong
    for _ in range(300):
        f = np.float32(rng.random() * 10.0 ** rng.integers(-8, 8))
        mid = (Fraction(float(f)) + Fraction(float(np.nextafter(f, np.float32(np.inf))))) / 2
        exact = mid.numerator * 10 ** 60 // mid.denominator
        digits = str(exact)
        point = len(digits) - 60
        for tweak in (0, 1, -1):
            text = str(exact + tweak)
            tokens.append((text[:point] or "0") + "." + text[point:] if point > 0 else
                          "0." + "0" * -point + text)
    tokens += [f"{rng.random() * 10.0 ** rng.integers(-10, 10):.{rng.integers(1, 12)}g}" for _ in range(2000)]
    values, codes = _arpa.parse_floats([t.encode() for t in tokens])
    for t, v, c in zip(tokens, values, codes):
        assert c == 0, t
        assert v.view(np.uint32) == exact_float32(t).view(np.uint32), t
    assert np.signbit(values[tokens.index("-0")])


@pytest.mark.parametrize("token", [b"nan", b"inf", b"-inf", b"1e40", b"-", b"1e", b".", b"1.2.3",
                                   b"0x10", b"--1", b"1e+"])
def test_parse_floats_rejects(token):
    _, codes = _arpa.parse_floats([token])
    assert codes[0] != 0


# --- writer errors --------------------------------------------------------------

@pytest.mark.parametrize("damage,match", [
    (lambda t: t.logprob[1].__setitem__(0, np.nan), "not finite"),
    (lambda t: t.backoff[0].__setitem__(1, np.inf), "not finite"),
    (lambda t: t.backoff[0].__setitem__(1, -np.inf), "not finite"),
    (lambda t: t.logprob[0].__setitem__(1, np.inf), "not finite"),
    (lambda t: t.backoff[1].__setitem__(1, -0.5), "highest order"),
    (lambda t: t.ids[1].__setitem__((2, 1), 5), "outside the vocabulary"),
    (lambda t: t.ids[1].__setitem__((0, 0), -1), "outside the vocabulary"),
    (lambda t: t.vocab.__setitem__(3, "a b"), "white space"),
    (lambda t: t.vocab.__setitem__(3, ""), "empty"),
    (lambda t: t.vocab.__setitem__(3, "b"), "duplicate"),
    (lambda t: t.logprob.__setitem__(1, t.logprob[1].astype(np.float64)), "float32"),
])
def test_writer_rejects_bad_tables_atomically(tmp_path, damage, match):
    tables = tiny_tables()
    damage(tables)
    path = tmp_path / "out.arpa"
    with pytest.raises(ValueError, match=match):
        write_arpa(tables, path)
    assert os.listdir(tmp_path) == []


def test_minus_inf_probabilities_read_and_written_as_kenlm_does(tmp_path):
    """KenLM reads "-inf" (double-conversion's symbol) and numbers below the float32
    range as a log10 probability of -infinity; nplm reads them and writes "-inf"."""
    data = GOOD.replace(b"-0.7\ta", b"-inf\ta").replace(b"-0.3\t<s> a", b"-1e39\t<s> a")
    t = read_arpa_bytes(data)
    assert t.logprob[0][3] == -np.inf and t.logprob[1][0] == -np.inf
    out = tmp_path / "out.arpa"
    write_arpa(t, out)
    assert out.read_bytes() == data.replace(b"-1e39", b"-inf").replace(b"-1.0\t", b"-1\t")
    assert_same_tables(t, read_arpa(out))
    kenlm = pytest.importorskip("kenlm")
    m = kenlm.Model(str(out))
    assert m.score("a", bos=False, eos=False) == -np.inf


# --- hostile input --------------------------------------------------------------

GOOD = (b"\\data\\\nngram 1=4\nngram 2=2\n\n\\1-grams:\n-1.0\t<unk>\t0\n0\t<s>\t-0.5\n-0.5\t</s>\t0\n"
        b"-0.7\ta\t-0.2\n\n\\2-grams:\n-0.3\t<s> a\n-0.2\ta </s>\n\n\\end\\\n")
# line numbers in GOOD: 1 \data\, 2-3 counts, 5 \1-grams:, 6-9 unigrams (9 = a),
# 11 \2-grams:, 12 "<s> a", 13 "a </s>", 15 \end\


def good_tables():
    return read_arpa_bytes(GOOD)


def test_good_example():
    t = good_tables()
    assert t.vocab == ["<unk>", "<s>", "</s>", "a"]
    assert t.ids[1].tolist() == [[1, 3], [3, 2]]
    assert t.first_line == [6, 12]
    assert t.backoff[1].tolist() == [0, 0]


HOSTILE = [
    ("bad float", GOOD.replace(b"-0.7\ta", b"-0.7x\ta"), 9, "bad number '-0.7x'"),
    ("bad back-off float", GOOD.replace(b"\t-0.2\n", b"\t-0.2.1\n"), 9, "bad number"),
    ("nan", GOOD.replace(b"-0.7\ta", b"nan\ta"), 9, "not a finite number"),
    ("inf back-off", GOOD.replace(b"\t-0.5\n", b"\t-inf\n"), 7, "not a finite number"),
    ("overflow", GOOD.replace(b"-0.3\t<s>", b"1e39\t<s>"), 12, "not a finite number"),
    ("positive prob", GOOD.replace(b"-0.7\ta", b"0.7\ta"), 9, "IRSTLM"),
    ("back-off on highest order", GOOD.replace(b"-0.2\ta </s>", b"-0.2\ta </s>\t-0.1"), 13,
     "non-zero back-off"),
    ("too few words", GOOD.replace(b"-0.3\t<s> a", b"-0.3\t<s>"), 12, "too few words"),
    ("too many words", GOOD.replace(b"-0.3\t<s> a", b"-0.3\t<s> a a"), 12, "too many words"),
    ("two words in a unigram", GOOD.replace(b"-0.7\ta\t", b"-0.7\ta b\t"), 9, "too many words"),
    ("space after unigram prob", GOOD.replace(b"-0.7\ta", b"-0.7 a"), 9, "tab after the probability"),
    ("junk after back-off", GOOD.replace(b"\t-0.2\n", b"\t-0.2 x\n"), 9, "after the back-off"),
    ("unknown word", GOOD.replace(b"-0.3\t<s> a", b"-0.3\t<s> b"), 12, "not seen in the unigrams"),
    ("<unk> without unigram", GOOD.replace(b"-1.0\t<unk>", b"-1.0\tz").replace(b"<s> a", b"<s> <unk>"),
     12, "no <unk>"),
    ("missing \\end\\", GOOD.replace(b"\\end\\\n", b""), 15, "missing \\end\\"),
    ("trailing garbage", GOOD + b"\nx\n", 17, "trailing garbage"),
    ("fewer entries than the header", GOOD.replace(b"ngram 2=2", b"ngram 2=3"), 15,
     "ends after 2 entries but the header says 3"),
    ("more entries than the header", GOOD.replace(b"ngram 2=2", b"ngram 2=1"), 13, "too many entries"),
    ("more unigrams than the header", GOOD.replace(b"ngram 1=4", b"ngram 1=3"), 9, "too many entries"),
    ("fewer unigrams than the header", GOOD.replace(b"ngram 1=4", b"ngram 1=5"), 11, "ends after 4 entries"),
    ("wrong section order", GOOD.replace(b"\\2-grams:", b"\\3-grams:"), 11, "expected n-gram header \\2-grams:"),
    ("missing \\data\\", GOOD.replace(b"\\data\\\n", b""), 1, "not \\data\\"),
    ("text before \\data\\", b"hello\n" + GOOD, 1, "not \\data\\"),
    ("non-consecutive counts", GOOD.replace(b"ngram 2=2", b"ngram 3=2"), 3, "consecutive"),
    ("bad count line", GOOD.replace(b"ngram 2=2", b"ngram 2=two"), 3, "count line"),
    ("no counts", GOOD.replace(b"ngram 1=4\nngram 2=2\n", b""), 2, "no 'ngram N=count'"),
    ("empty file", b"", 1, "empty file"),
    ("blank file", b"\n\n  \n", 4, "empty file"),
    ("huge header count", GOOD.replace(b"ngram 2=2", b"ngram 2=99999999999"), 3, "more than a"),
    ("absurd header count", GOOD.replace(b"ngram 2=2", b"ngram 2=99999999999999999999"), 3, "absurd"),
    ("truncated file", GOOD[:GOOD.index(b"a </s>") + 1], 13, "truncated"),
    ("truncated inside a section", GOOD[:GOOD.index(b"-0.2\ta </s>")], 13, "truncated file: it ends inside"),
    ("NUL byte", GOOD.replace(b"a </s>", b"a\0 </s>"), 13, "NUL byte"),
    ("NUL in a unigram", GOOD.replace(b"-0.7\ta", b"-0.7\ta\0"), 9, "NUL byte"),
    ("binary garbage", bytes(range(256)) * 4, 1, "not an nplm binary or ARPA file"),
    ("garbage in a section", GOOD.replace(b"-0.3\t<s> a", b"\x93\x01\xfe\x88garbage"), 12, "bad number"),
    ("KenLM binary", b"mmap lm http://kheafield.com/code\0\0\0\x01\x02" + bytes(100), 1, "KenLM binary"),
    ("IRSTLM binary", b"blmt 3 1000\n" + bytes(50), 1, "IRSTLM"),
    ("-inf back-off", GOOD.replace(b"\t-0.5\n", b"\t-1e39\n"), 7, "not a finite number"),
]


@pytest.mark.parametrize("name,data,line,message", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_input(tmp_path, name, data, line, message):
    path = tmp_path / "bad.arpa"
    path.write_bytes(data)
    with pytest.raises(FormatError) as info:
        read_arpa(path)
    err = info.value
    assert err.path == str(path) and err.line == line, str(err)
    assert str(err).startswith(f"{path}:{line}: ")
    assert message in str(err)


@pytest.mark.parametrize("name,data,line,message", HOSTILE[:6] + HOSTILE[16:21], ids=[h[0] for h in HOSTILE[:6] + HOSTILE[16:21]])
def test_hostile_input_compressed(tmp_path, name, data, line, message):
    """The same errors and lines through gzip (header counts unchecked up front)."""
    path = tmp_path / "bad.arpa.gz"
    path.write_bytes(gzip.compress(data))
    with pytest.raises(FormatError) as info:
        read_arpa(path)
    assert info.value.line == line and message in str(info.value)


def test_crlf_and_blank_lines_accepted():
    data = GOOD.replace(b"\n\n\\2-grams:", b"\n\n\n  \n\\2-grams:").replace(b"\n", b"\r\n")
    assert_same_tables(good_tables(), read_arpa_bytes(data))


def test_truncated_compressed_file(tmp_path):
    path = tmp_path / "bad.arpa.xz"
    path.write_bytes(lzma.compress(GOOD * 50)[:-40])
    with pytest.raises(FormatError, match="corrupt or truncated compressed data"):
        read_arpa(path)


def test_gzipped_kenlm_binary(tmp_path):
    path = tmp_path / "model.binary.gz"
    path.write_bytes(gzip.compress(b"mmap lm http://kheafield.com/code\0" + bytes(1000)))
    with pytest.raises(FormatError, match="KenLM binary") as info:
        read_arpa(path)
    assert info.value.line == 1


def test_nplm_binary_passed_as_arpa(tmp_path):
    from nplm.io import container
    path = tmp_path / "model.nplm"
    container.write(path, "backoff", {"order": 2}, {"x": np.arange(10, dtype=np.float32)})
    with pytest.raises(FormatError, match="nplm binary") as info:
        read_arpa(path)
    assert info.value.line == 1


def test_huge_count_in_compressed_file_is_not_allocated(tmp_path):
    """The header cannot be checked against a compressed file's size; the reader
    must grow its arrays with the data instead of trusting the count."""
    path = tmp_path / "bad.arpa.bz2"
    path.write_bytes(bz2.compress(GOOD.replace(b"ngram 2=2", b"ngram 2=900000000000")))
    with pytest.raises(FormatError, match="ends after 2 entries but the header says 900000000000"):
        read_arpa(path)


def test_missing_file():
    with pytest.raises(OSError):
        read_arpa("/nonexistent/model.arpa")


def test_read_from_stdin_compressed(tmp_path):
    import subprocess
    import sys
    path = tmp_path / "m.arpa.gz"
    path.write_bytes(gzip.compress(GOOD))
    code = "from nplm.backoff.arpa import read_arpa; t = read_arpa('-'); print(t.counts, t.source)"
    with open(path, "rb") as stdin:
        out = subprocess.run([sys.executable, "-c", code], stdin=stdin, capture_output=True, text=True,
                             cwd=ROOT, check=True)
    assert out.stdout.strip() == "[4, 2] -"


def test_endless_line_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(arpa, "CHUNK", 100)
    monkeypatch.setattr(arpa, "MAX_LINE", 1000)
    path = tmp_path / "bad.arpa"
    path.write_bytes(GOOD.replace(b"\\end\\\n", b"\\end\\\n" + b"x" * 5000))
    with pytest.raises(FormatError, match="a line longer than") as info:
        read_arpa(path)
    assert info.value.line == 16
