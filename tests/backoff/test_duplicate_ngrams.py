"""An ARPA that lists a unigram or an n-gram again loads as KenLM loads it, with a
warning naming the line: KenLM's probing vocabulary gives the repeated word a new id
that no lookup reaches, and its probing tables find the first of equal n-grams, so
the first entry is the one used.  A widely copied CTC-decoder recipe appends
``</s>`` to the unigrams of an lmplz model; that file must score as in kenlm, and
``build_binary`` of it must give KenLM's bytes."""
import itertools
import subprocess
import warnings

import kenlm
import pytest

import nplm

from helpers import arpa_text, kenlm_program, quiet_config, run_cli

_UNI = ["-1.5\t<unk>\t0", "0\t<s>\t-0.5", "-1.0\t</s>\t0", "-1.2\ta\t-0.3", "-1.3\tb\t-0.2", "-1.4\tc\t0"]
_BI = ["-0.5\t<s> a\t-0.1", "-0.6\ta b\t-0.2", "-0.7\tb c\t-0.15", "-0.4\tb </s>", "-0.8\tc a\t0",
       "-0.3\t<s> b\t-0.05"]
_TRI = ["-0.2\t<s> a b", "-0.25\ta b c", "-0.1\ta b </s>", "-0.15\t<s> b c"]

# name -> (ARPA, line of the first entry listed again, what the warning says)
CASES = {
    "</s> appended": (arpa_text(_UNI + ["-2.5\t</s>\t-0.4"], _BI, _TRI), 13, "'</s>'"),
    "word again, then more words": (arpa_text(_UNI[:4] + ["-0.9\ta\t-0.7"] + _UNI[4:], _BI, _TRI), 11, "'a'"),
    "middle n-gram again": (arpa_text(_UNI, _BI + ["-1.7\ta b\t-0.9"], _TRI), 21, '2-gram "a b"'),
    "middle n-gram first listed later": (arpa_text(_UNI, ["-1.7\ta b\t-0.9"] + _BI, _TRI), 17, '2-gram "a b"'),
    "highest n-gram again": (arpa_text(_UNI, _BI, _TRI + ["-1.1\ta b c"]), 27, '3-gram "a b c"'),
    "all of them": (arpa_text(_UNI + ["-2.5\t</s>\t-0.4"], _BI + ["-1.7\tb c"], ["-1.1\t<s> b c"] + _TRI),
                    13, "'</s>'"),
    "lines copied": (arpa_text(_UNI, _BI + ["-0.6\ta b\t-0.2"], _TRI + ["-0.25\ta b c"]), 21, '2-gram "a b"'),
    # <unk> and <UNK> are one word to KenLM, whose later entry overwrites the earlier
    "<unk> again": (arpa_text(_UNI + ["-2.5\t<unk>\t-0.4"], _BI, _TRI), 13, "<unk> 2 times"),
    "<unk> and <UNK>": (arpa_text(_UNI + ["-2.5\t<UNK>\t-0.4"], _BI + ["-0.9\t<UNK> a"], _TRI), 13,
                        "<unk> 2 times"),
}
LAST_WINS = {"<unk> again", "<unk> and <UNK>"}
# n-grams listed again with other values, which KenLM's trie keeps in an order left open
DIFFERENT = {"middle n-gram again", "middle n-gram first listed later", "highest n-gram again", "all of them"}
WORDS = ["a", "b", "c", "</s>", "<s>", "zz", "<UNK>"]
SENTENCES = [" ".join(p) for n in range(4) for p in itertools.product(WORDS, repeat=n)]


def _write(tmp_path, name):
    path = tmp_path / "dup.arpa"
    path.write_text(CASES[name][0])
    return path


def _same_scores(km, nm):
    for line in SENTENCES:
        for bos, eos in itertools.product((True, False), repeat=2):
            want = list(km.full_scores(line, bos, eos))
            got = [tuple(s) for s in nm.full_scores(line, bos, eos)]
            assert len(got) == len(want), line
            for (p, n, o), (q, m, u) in zip(want, got):
                assert abs(p - q) <= 1e-6 and (n, o) == (m, u), (line, bos, eos, want, got)


@pytest.mark.parametrize("name", list(CASES))
def test_scores_as_kenlm_with_a_warning(tmp_path, name):
    path = _write(tmp_path, name)
    _, line, what = CASES[name]
    km = kenlm.Model(str(path), quiet_config(kenlm))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nm = nplm.Model(str(path), quiet_config())
    messages = [str(w.message) for w in caught]
    which = "last entry" if name in LAST_WINS else "first entry"
    assert any(m.startswith(f"{path}:{line}: ") and what in m and which in m for m in messages), messages
    _same_scores(km, nm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nplm.build_binary(str(path), str(tmp_path / "dup.nplm"))   # nplm's own format, the same answers
    _same_scores(km, nplm.Model(str(tmp_path / "dup.nplm")))


@pytest.mark.parametrize("kind", ["probing", "trie"])
@pytest.mark.parametrize("name", list(CASES))
def test_build_binary_gives_kenlm_bytes(tmp_path, name, kind):
    path = _write(tmp_path, name)
    ref, ours = tmp_path / "ref.bin", tmp_path / "ours.bin"
    subprocess.run([kenlm_program("build_binary"), kind, str(path), str(ref)], check=True, capture_output=True)
    if kind == "trie" and name in DIFFERENT:
        with pytest.warns(UserWarning) if name == "all of them" else warnings.catch_warnings():
            with pytest.raises(nplm.FormatError, match="duplicate .*-gram with other values: KenLM's trie"):
                nplm.build_binary(str(path), str(ours), kind)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nplm.build_binary(str(path), str(ours), kind)
    assert ours.read_bytes() == ref.read_bytes()
    # and KenLM's file reads in nplm as in kenlm
    _same_scores(kenlm.Model(str(ref), quiet_config(kenlm)), nplm.Model(str(ref), quiet_config()))


@pytest.mark.parametrize("name", ["</s> appended", "word again, then more words", "all of them"])
def test_query_prints_kenlm_query_ids(tmp_path, name):
    """query's word=ID: the repeated word took an id, so the words after it are shifted."""
    path = _write(tmp_path, name)
    text = "a b c\nc a b </s> zz\nb b a c\n"
    want = subprocess.run([kenlm_program("query"), str(path)], input=text, capture_output=True, text=True,
                          check=True).stdout
    r = run_cli("query", path, stdin=text)
    assert r.returncode == 0 and r.stdout == want, r.stderr
    assert "listed again" in r.stderr and "Traceback" not in r.stderr
