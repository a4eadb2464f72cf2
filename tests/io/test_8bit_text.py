"""Text in an 8-bit encoding (Latin-1 here) through the whole chain, as KenLM takes it:
a word is its bytes.  ``nplm estimate`` -> ``nplm build-binary`` -> ``nplm query``,
and the programs nplm installs under KenLM's names, give the bytes of KenLM's lmplz
-> build_binary -> query, and the Python API finds the Latin-1 words from bytes, or
from the str that nplm.io.text.word_str makes of them."""
import subprocess

import kenlm
import pytest

import nplm
from nplm.io.text import open_lines, split_words, word_bytes, word_str

from helpers import DATA, installed_program, kenlm_program, need_shared, quiet_config, run_cli

# PTB words turned into Latin-1 bytes: é, ï, a no-break space inside a word (not white
# space to KenLM), bytes that are no UTF-8 at all, and \v / \x1c / \x85, which lmplz
# keeps inside a word (query splits at \v, as KenLM's query does).
SWAPS = [(5, b" the ", b" caf\xe9 "), (7, b" of ", b" na\xefve "), (11, b" a ", b" a\xa0b "),
         (17, b" and ", b" x\x0by \x1cz\x85 ")]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    need_shared()
    lines = (DATA / "ptb" / "ptb.valid.txt").read_bytes().replace(b"<unk>", b"UNK").split(b"\n")[:1500]
    out = []
    for i, line in enumerate(lines):
        for every, old, new in SWAPS:
            if i % every == 0:
                line = line.replace(old, new, 1)
        if i % 13 == 0:
            line += b" \xff\xfe \xe9t\xe9"
        out.append(line)
    path = tmp_path_factory.mktemp("latin1") / "latin1.txt"
    path.write_bytes(b"\n".join(out) + b"\n")
    return path


def _run(program, *args, stdin=None, find=kenlm_program):
    """The standard output of ``program`` (KenLM's, or as ``find`` finds it)."""
    return subprocess.run([find(program), *map(str, args)], input=stdin, capture_output=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def chain(corpus):
    """The ARPA and binaries of both chains: {name: (KenLM's path, nplm's path)}."""
    folder = corpus.parent
    ref, ours = folder / "ref.arpa", folder / "ours.arpa"
    ref.write_bytes(_run("lmplz", "-o", "3", stdin=corpus.read_bytes()))
    r = run_cli("estimate", "-o", "3", "--text", corpus, "--arpa", ours, "-q")
    assert r.returncode == 0, r.stderr
    out = {"arpa": (ref, ours)}
    for kind in ("probing", "trie"):
        out[kind] = (folder / f"ref.{kind}", folder / f"ours.{kind}")
        _run("build_binary", kind, ref, out[kind][0])
        r = run_cli("build-binary", "--quiet", kind, ours, out[kind][1])
        assert r.returncode == 0, r.stderr
    return out


def test_estimate_and_build_binary_are_byte_identical(chain):
    ref, ours = chain["arpa"]
    assert b"\tcaf\xe9\t" in ref.read_bytes() and b"\ta\xa0b\t" in ref.read_bytes()
    for kind in ("arpa", "probing", "trie"):
        ref, ours = chain[kind]
        assert ours.read_bytes() == ref.read_bytes(), kind


@pytest.mark.parametrize("kind", ["arpa", "probing", "trie"])
def test_query_prints_what_kenlm_query_prints(chain, corpus, kind):
    text = b"\n".join(corpus.read_bytes().split(b"\n")[:120]) + b"\n"
    want = _run("query", chain[kind][0], stdin=text)
    r = run_cli("query", chain[kind][1], stdin=text)
    assert r.returncode == 0, r.stderr
    assert b"caf\xe9=" in want and r.stdout.split(b"\n") == want.split(b"\n")


@pytest.mark.parametrize("kind", ["probing", "trie"])
def test_kenlms_program_names_give_kenlms_chain(chain, corpus, tmp_path, kind):
    """lmplz -> build_binary -> query as nplm installs them, byte for byte KenLM's."""
    text = b"\n".join(corpus.read_bytes().split(b"\n")[:120]) + b"\n"
    arpa, binary = tmp_path / "lm.arpa", tmp_path / "lm.bin"
    arpa.write_bytes(_run("lmplz", "-o", "3", "-S", "10%", stdin=corpus.read_bytes(), find=installed_program))
    _run("build_binary", kind, arpa, binary, find=installed_program)
    ref_arpa, ref_binary = chain["arpa"][0], chain[kind][0]
    assert arpa.read_bytes() == ref_arpa.read_bytes() and binary.read_bytes() == ref_binary.read_bytes()
    want = _run("query", ref_binary, stdin=text)
    assert b"caf\xe9=" in want and _run("query", binary, stdin=text, find=installed_program) == want


@pytest.mark.parametrize("kind", ["arpa", "probing", "trie"])
def test_python_api_matches_kenlm(chain, corpus, kind):
    km = kenlm.Model(str(chain[kind][0]), quiet_config(kenlm))
    nm = nplm.Model(str(chain[kind][1]), quiet_config())
    lines = corpus.read_bytes().split(b"\n")[:200]
    for raw in lines:
        want = list(km.full_scores(raw))
        assert [tuple(s) for s in nm.full_scores(raw)] == want
        assert [tuple(s) for s in nm.full_scores(word_str(raw))] == want      # the same words as str
        latin = raw.decode("latin-1")           # a str of real é: UTF-8 bytes, unknown to both
        assert [tuple(s) for s in nm.full_scores(latin)] == list(km.full_scores(latin))
    for word in (b"caf\xe9", b"a\xa0b", b"\xff\xfe", b"x\x0by"):
        assert (word in nm) == (word in km) and (word_str(word) in nm) == (word in km), word
    assert "café" not in nm and "café" not in km


def test_vocabulary_round_trips_the_bytes(chain):
    nm = nplm.Model(str(chain["probing"][1]), quiet_config())
    words = {word_bytes(w) for w in nm.vocab.words()}
    assert {b"caf\xe9", b"na\xefve", b"a\xa0b", b"\xff\xfe", b"\xe9t\xe9", b"\x1cz\x85"} <= words


def test_text_helpers_split_as_kenlm(tmp_path):
    raw = b"caf\xe9 a\xa0b\tx\x0by\x1cz \xff\n"
    path = tmp_path / "t.txt"
    path.write_bytes(raw)
    with open_lines(str(path)) as f:
        (line,) = f
    assert [word_bytes(w) for w in split_words(line)] == raw.split()
    assert word_bytes(word_str(bytes(range(256)))) == bytes(range(256))
