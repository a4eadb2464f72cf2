"""Writing KenLM's binary files: byte for byte the files KenLM's build_binary wrote
(../shared/reference/kenlm-binary), and loaded by the real kenlm module with the
scores of the ARPA they came from."""
import itertools
import lzma
import os
import random
import subprocess

import kenlm
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import nplm
from nplm.backoff.arpa import read_arpa
from nplm.backoff.kenlm import write as kenlm_write
from nplm.cli.main import main

from helpers import REFERENCE, arpa_text, kenlm_program, need_shared, quiet_config, random_arpa, read_lines, srilm_variants

KENLM_BINARY = REFERENCE / "kenlm-binary"
# file part -> nplm.build_binary's type and options (README.md there gives the flags)
FLAGS = {
    "probing": ("probing", {}),
    "probing-p1.2": ("probing", {"multiplier": 1.2}),
    "probing-novocab": ("probing", {"include_vocab": False}),
    "trie": ("trie", {}),
    "trie-q8b8": ("trie", {"prob_bits": 8, "backoff_bits": 8}),
    "trie-q4b6": ("trie", {"prob_bits": 4, "backoff_bits": 6}),
    "trie-a22": ("trie", {"pointer_bits": 22}),
    "trie-a22q8b8": ("trie", {"pointer_bits": 22, "prob_bits": 8, "backoff_bits": 8}),
    "trie-novocab": ("trie", {"include_vocab": False}),
}



def _walk(model, words):
    """Scores and states of a sentence walked word by word with BaseScore."""
    s, t = kenlm.State(), kenlm.State()
    model.BeginSentenceWrite(s)
    scores, states = [], []
    for w in words + ["</s>"]:
        scores.append(model.BaseScore(s, w, t))
        states.append(t.__copy__())
        s, t = t, s
    return scores, states


def assert_same_models(a, b, lines):
    """kenlm models a and b: every token's (log10 prob, ngram length, oov), and
    which states of their walks compare equal."""
    sa, sb = [], []
    for line in lines:
        assert list(a.full_scores(line)) == list(b.full_scores(line)), line
        pa, ta = _walk(a, line.split())
        pb, tb = _walk(b, line.split())
        assert pa == pb, line
        sa += ta
        sb += tb
    for i, j in itertools.combinations(range(min(len(sa), 150)), 2):
        assert (sa[i] == sa[j]) == (sb[i] == sb[j])


@pytest.fixture(scope="module")
def texts():
    need_shared()
    return read_lines(REFERENCE / "ptb5k.txt", limit=150)


@pytest.fixture(scope="module")
def tables():
    need_shared()
    return {o: read_arpa(REFERENCE / f"ptb5k.{o}.arpa.xz") for o in ("o3", "o5")}


@pytest.mark.parametrize("order", ["o3", "o5"])
@pytest.mark.parametrize("part", sorted(FLAGS))
def test_bytes_equal_build_binarys(tables, tmp_path, order, part):
    kind, options = FLAGS[part]
    out = tmp_path / "m.bin"
    assert kenlm_write.build_binary(tables[order], out, kind, messages=None, **options) == kind
    with lzma.open(KENLM_BINARY / f"ptb5k.{order}.{part}.bin.xz") as f:
        expected = f.read()
    got = out.read_bytes()
    assert len(got) == len(expected)
    differ = np.flatnonzero(np.frombuffer(got, np.uint8) != np.frombuffer(expected, np.uint8))
    assert got == expected, f"first difference at byte {differ[0]}"


@pytest.mark.parametrize("order", ["o3", "o5"])
@pytest.mark.parametrize("part", [p for p in sorted(FLAGS) if p.startswith("probing")])
def test_probing_built_while_the_arpa_is_read_is_the_same_file(tmp_path, order, part):
    """From an ARPA file, each order of a probing file is inserted as soon as its
    section has been read (build_binary_from_arpa): the same bytes."""
    need_shared()
    kind, options = FLAGS[part]
    out = tmp_path / "m.bin"
    nplm.build_binary(str(REFERENCE / f"ptb5k.{order}.arpa.xz"), str(out), kind, messages=None, **options)
    with lzma.open(KENLM_BINARY / f"ptb5k.{order}.{part}.bin.xz") as f:
        assert out.read_bytes() == f.read()


@pytest.mark.parametrize("part", sorted(FLAGS))
def test_kenlm_scores_the_written_file_as_its_own(tables, texts, tmp_path, part):
    kind, options = FLAGS[part]
    ours = tmp_path / "m.bin"
    kenlm_write.build_binary(tables["o5"], ours, kind, messages=None, **options)
    theirs = tmp_path / "ref.bin"
    with lzma.open(KENLM_BINARY / f"ptb5k.o5.{part}.bin.xz") as f:
        theirs.write_bytes(f.read())
    assert_same_models(kenlm.Model(str(ours), quiet_config(kenlm)), kenlm.Model(str(theirs), quiet_config(kenlm)), texts[:60])


def test_cli_takes_build_binarys_arguments(tmp_path):
    need_shared()
    arpa = str(REFERENCE / "ptb5k.o3.arpa.xz")
    with lzma.open(KENLM_BINARY / "ptb5k.o3.trie-a22q8b8.bin.xz") as f:
        expected = f.read()
    # options before, between and after the positionals, as getopt allows
    o1, o2, o3 = (str(tmp_path / name) for name in ("o1", "o2", "o3"))
    for argv, out in ((["-a", "22", "-q", "8", "-b", "8", "trie", arpa, o1], o1),
                      (["trie", "-q", "8", arpa, "-a", "22", o2], o2),
                      (["-q", "8", "trie", arpa, o3, "-a", "22"], o3)):
        assert main(["build-binary"] + argv) == 0
        with open(out, "rb") as f:
            assert f.read() == expected
    with lzma.open(KENLM_BINARY / "ptb5k.o3.probing.bin.xz") as f:
        assert main(["build-binary", arpa, str(tmp_path / "p.bin")]) == 0   # build_binary's default
        assert (tmp_path / "p.bin").read_bytes() == f.read()


def test_output_named_nplm_gets_nplms_format(tmp_path):
    need_shared()
    arpa = str(REFERENCE / "ptb5k.o3.arpa.xz")
    assert nplm.build_binary(arpa, str(tmp_path / "m.nplm")) == "nplm"
    assert (tmp_path / "m.nplm").read_bytes()[:8] == b"\x93NPLM\r\n\x1a"
    assert nplm.build_binary(arpa, str(tmp_path / "m.klm"), "nplm") == "nplm"
    assert nplm.build_binary(arpa, str(tmp_path / "m.bin")) == "probing"
    assert (tmp_path / "m.bin").read_bytes().startswith(b"mmap lm http://kheafield.com/code format version 5\n")


@pytest.mark.parametrize("kind, options, message", [
    ("probing", {"prob_bits": 8}, "only implemented in the trie"),
    ("trie", {"backoff_bits": 8}, r"needs probability quantisation \(-q\)"),
    ("trie", {"prob_bits": 26}, "1 to 25 bits"),
    ("trie", {"prob_bits": 0}, "1 to 25 bits"),
    ("probing", {"multiplier": 1.0}, "must be > 1.0"),
    ("trie", {"pointer_bits": 256}, "0 to 255"),
    ("nplm", {"prob_bits": 8}, "apply to KenLM's formats"),
    ("tree", {}, "probing, trie, nplm"),
])
def test_bad_settings_are_refused_before_writing(tables, tmp_path, kind, options, message):
    with pytest.raises(ValueError, match=message):
        kenlm_write.build_binary(tables["o3"], tmp_path / "m.bin", kind, **options)
    assert not list(tmp_path.iterdir())


def test_estimate_writes_the_binary_in_one_pass(tmp_path):
    need_shared()
    text = tmp_path / "t.txt"
    text.write_text("\n".join(read_lines(REFERENCE / "ptb5k.txt", limit=400)) + "\n")
    arpa, one_pass = tmp_path / "m.arpa", tmp_path / "one.bin"
    assert main(["estimate", "-o", "4", "--text", str(text), "--arpa", str(arpa), "--binary",
                 str(one_pass), "--type", "trie", "-q", "8", "-b", "7", "-a", "22",
                 "--discount_fallback", "--quiet"]) == 0
    nplm.build_binary(str(arpa), str(tmp_path / "two.bin"), "trie", prob_bits=8, backoff_bits=7,
                      pointer_bits=22)
    assert one_pass.read_bytes() == (tmp_path / "two.bin").read_bytes()
    with pytest.raises(ValueError, match="apply to KenLM"):
        nplm.estimate(str(text), 3, binary=str(tmp_path / "x.nplm"), binary_options={"prob_bits": 8},
                      progress=False)


# --- models KenLM builds with blank entries, without <unk>, with broken contexts -------


def _kenlm_loads(path):
    try:
        return kenlm.Model(str(path), quiet_config(kenlm))
    except (OSError, RuntimeError, Exception):   # kenlm raises OSError or its own errors
        return None


def _build_binary_file(tmp_path, arpa, args):
    out = tmp_path / "kenlm.bin"
    subprocess.run([kenlm_program("build_binary")] + args + [str(arpa), str(out)], check=True, capture_output=True)
    return out


def test_pruned_suffixes_get_kenlms_blanks(tmp_path, texts):
    need_shared()
    full, pruned = srilm_variants(tmp_path)
    lines = texts[:40]
    for path in (full, pruned):
        out = tmp_path / "m.bin"
        nplm.build_binary(path, str(out), "probing")
        assert_same_models(kenlm.Model(str(out), quiet_config(kenlm)), kenlm.Model(path, quiet_config(kenlm)), lines)
        nplm.build_binary(path, str(tmp_path / "t.bin"), "trie", prob_bits=8)
        assert_same_models(kenlm.Model(str(tmp_path / "t.bin"), quiet_config(kenlm)),
                           kenlm.Model(str(_build_binary_file(tmp_path, path, ["-q", "8", "trie"])), quiet_config(kenlm)),
                           lines)


@pytest.mark.parametrize("kind", ["probing", "trie"])
def test_missing_unk_gets_the_u_probability(tmp_path, kind):
    path = tmp_path / "m.arpa"
    path.write_text(arpa_text(["-1\t<s>\t-0.5", "-0.5\t</s>", "-0.7\ta\t-0.2", "-1.2\tb"],
                          ["-0.3\t<s> a", "-0.2\ta b", "-0.4\ta </s>"]))
    out = tmp_path / "m.bin"
    nplm.build_binary(str(path), str(out), kind, unknown_logprob=-7.5, messages=None)
    m = kenlm.Model(str(out), quiet_config(kenlm))
    assert list(m.full_scores("a zzz b"))[1] == pytest.approx((-7.5 - 0.2, 1, True))   # a's back-off
    nplm.build_binary(str(path), str(out), kind, messages=None)     # KenLM's default -100
    assert_same_models(kenlm.Model(str(out), quiet_config(kenlm)), kenlm.Model(str(path), quiet_config(kenlm)),
                       ["b a zzz", "a b", "zzz zzz a b"])


def test_missing_context_and_duplicates_name_the_line(tmp_path):
    path = tmp_path / "m.arpa"
    path.write_text(arpa_text(["-1\t<unk>", "-1\t<s>\t-0.5", "-0.5\t</s>", "-0.7\ta\t-0.2", "-1.2\tb"],
                          ["-0.3\t<s> a\t-0.1", "-0.2\ta b"], ["-0.2\tb a b"]))
    for kind in ("probing", "trie"):
        with pytest.raises(nplm.FormatError, match=r"m.arpa:18: the context of .*3-gram"):
            nplm.build_binary(str(path), str(tmp_path / "m.bin"), kind)
    path.write_text(arpa_text(["-1\t<unk>", "-1\t<s>\t-0.5", "-0.5\t</s>", "-0.7\ta\t-0.2", "-1.2\tb"],
                          ["-0.3\t<s> a", "-0.2\ta b", "-0.4\t<s> a"]))
    with pytest.raises(nplm.FormatError, match=r"m.arpa:15: duplicate 2-gram with other values"):
        nplm.build_binary(str(path), str(tmp_path / "m.bin"), "trie")
    assert not (tmp_path / "m.bin").exists()


def test_a_read_error_after_a_build_error_is_the_one_reported(tmp_path):
    """A probing file is built while its ARPA is read, so an order's build can fail
    before a later section's reading does: the error reported is the reader's, as
    when the whole file is read first, and no file is left."""
    unigrams = ["-1\t<unk>", "-1\t<s>\t-0.5", "-0.5\t</s>", "-0.7\ta\t-0.2", "-1.2\tb\t-0.1"]
    path = tmp_path / "m.arpa"
    path.write_text(arpa_text(unigrams, ["-0.3\t<s> a\t-0.1", "-0.2\ta b\t-0.1"], ["-0.2\tb a b\t-0.1"],
                          ["-0.2\t<s> a b a", "-0.x\ta b a b"]))
    with pytest.raises(nplm.FormatError, match=r"m.arpa:\d+: bad number '-0.x' in the 4-gram"):
        nplm.build_binary(str(path), str(tmp_path / "m.bin"), "probing")
    assert not (tmp_path / "m.bin").exists()
    path.write_text(arpa_text(unigrams, ["-0.3\t<s> a\t-0.1", "-0.2\ta b\t-0.1"], ["-0.2\tb a b\t-0.1"],
                          ["-0.2\t<s> a b a", "-0.4\ta b a b"]))
    with pytest.raises(nplm.FormatError, match=r"m.arpa:19: the context of .*3-gram"):
        nplm.build_binary(str(path), str(tmp_path / "m.bin"), "probing")
    assert not (tmp_path / "m.bin").exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(random_arpa())
def test_random_models_load_in_kenlm_as_their_arpa(tmp_path_factory, case):
    """Whatever KenLM builds from an ARPA, nplm's file of it scores the same in
    kenlm."""
    text, words = case
    d = tmp_path_factory.mktemp("r")
    path = d / "m.arpa"
    path.write_text(text)
    reference = _kenlm_loads(path)
    if reference is None:
        return
    rng = random.Random(1)
    lines = [" ".join(rng.choice(words + ["oov"]) for _ in range(rng.randint(1, 8))) for _ in range(12)]
    for kind in ("probing", "trie"):
        out = d / f"{kind}.bin"
        nplm.build_binary(str(path), str(out), kind, messages=None)
        assert_same_models(kenlm.Model(str(out), quiet_config(kenlm)), reference, lines)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(random_arpa())
def test_random_models_byte_equal_build_binarys(tmp_path_factory, case):
    text, _ = case
    build_binary = kenlm_program("build_binary")
    d = tmp_path_factory.mktemp("b")
    path = d / "m.arpa"
    path.write_text(text)
    for kind, flags, options in (("probing", [], {}), ("trie", ["-q", "5", "-b", "3", "-a", "2"],
                                                       {"prob_bits": 5, "backoff_bits": 3, "pointer_bits": 2})):
        ref = d / "ref.bin"
        r = subprocess.run([build_binary] + flags + [kind, str(path), str(ref)], capture_output=True)
        if r.returncode != 0:
            continue
        nplm.build_binary(str(path), str(d / "m.bin"), kind, messages=None, **options)
        assert (d / "m.bin").read_bytes() == ref.read_bytes(), (kind, text)


def test_missing_sentence_markers_need_s(tmp_path):
    path = tmp_path / "m.arpa"
    path.write_text(arpa_text(["-1\t<unk>", "-1\t<s>\t-0.5", "-0.7\ta\t-0.2", "-1.2\tb"], ["-0.3\t<s> a", "-0.2\ta b"]))
    for kind in ("probing", "trie"):
        with pytest.raises(nplm.FormatError, match="missing </s>.*-s builds it"):
            nplm.build_binary(str(path), str(tmp_path / "m.bin"), kind)
        assert main(["build-binary", "-s", kind, str(path), str(tmp_path / "m.bin")]) == 0
        m = kenlm.Model(str(tmp_path / "m.bin"), quiet_config(kenlm))
        assert [p for p, _, _ in m.full_scores("a b", eos=False)] == pytest.approx([-0.3, -0.2])
        ref = _build_binary_file(tmp_path, path, ["-s", kind])
        assert (tmp_path / "m.bin").read_bytes() == ref.read_bytes()


def test_nplm_serves_its_smallest_file_as_kenlm_does(tables, texts, tmp_path):
    """nplm's smallest back-off file is KenLM's trie -a 22 -q 8 -b 8; nplm's own
    query engine for KenLM files answers on it as kenlm does."""
    pytest.importorskip("nplm.backoff.kenlm.reader")
    out = tmp_path / "small.bin"
    nplm.build_binary(str(REFERENCE / "ptb5k.o5.arpa.xz"), str(out), "trie", prob_bits=8, backoff_bits=8,
                      pointer_bits=22)
    km, nm = kenlm.Model(str(out), quiet_config(kenlm)), nplm.Model(str(out))
    for line in texts:
        assert [tuple(x) for x in nm.full_scores(line)] == list(km.full_scores(line)), line


@pytest.mark.parametrize("p, message", [("1e9", "of memory but only"), ("1e38", "would need about")])
def test_huge_multiplier_fails_before_reading(tmp_path, capsys, p, message):
    need_shared()
    out = tmp_path / "m.bin"
    assert main(["build-binary", "-p", p, str(REFERENCE / "ptb5k.o3.arpa.xz"), str(out)]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and "ptb5k.o3.arpa.xz: 100%" not in err, err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("kind", ["probing", "trie"])
def test_an_order_nothing_can_load_is_refused_before_writing(tmp_path, kind):
    """A KenLM file above nplm's highest order (and KenLM's) is refused, naming the
    limit, and nothing is written."""
    from nplm import _kernels
    n = _kernels.QUERY_MAX_ORDER + 1
    grams = [[f"-0.3\t{' '.join((['<s>'] + ['a'] * n)[:k])}" + ("\t-0.1" if k < n else "")] for k in range(2, n + 1)]
    path = tmp_path / "deep.arpa"
    path.write_text(arpa_text(["-1\t<unk>\t0", "0\t<s>\t-0.5", "-0.5\t</s>\t0", "-0.7\ta\t-0.2"], *grams))
    out = tmp_path / "deep.bin"
    with pytest.raises(nplm.FormatError, match=f"order {n}: .* up to order {n - 1}"):
        nplm.build_binary(str(path), str(out), kind)
    assert main(["build-binary", kind, str(path), str(out)]) == 1
    assert not out.exists() and os.listdir(tmp_path) == ["deep.arpa"]
