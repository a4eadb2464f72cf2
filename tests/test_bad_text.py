"""Awkward query and training text: empty lines, 100k-token lines, every kind of
white space, Unicode words, markup that looks like <s>, NUL bytes, invalid UTF-8.

Where kenlm defines the behaviour (its Python module splits on ASCII white
space -- space, \\t, \\n, \\v, \\f, \\r -- like ``bytes.split()``; any other
byte, Unicode spaces included, is part of a word; a word it does not know is
<unk>; ``<s>`` inside a sentence is looked up as the word <s>), nplm must give
kenlm's numbers.  Where it does not:
* a ``str`` holding a surrogate U+DC80..U+DCFF is the byte it stands for (nplm reads
  text in other encodings so, PEP 383), where kenlm raises UnicodeEncodeError; other
  lone surrogates cannot be encoded: UnicodeEncodeError (a ValueError), as kenlm;
* ``bytes`` are taken as they are (invalid UTF-8 is just an unknown word);
* a NUL byte is an ordinary byte of a word, so a word holding one is unknown
  (kenlm hands words to C++ as C strings and so looks up "a\\0b" as "a");
* training/estimation text uses lmplz's delimiters (space, \\t, \\r, NUL); its words
  are bytes in any encoding, as lmplz's (tests/io/test_8bit_text.py).
"""
import subprocess
import sys
from pathlib import Path

import kenlm
import numpy as np
import pytest

import nplm
from nplm.backoff import arpa
from nplm.backoff import binary as backoff
from nplm.errors import FormatError

ROOT = Path(__file__).resolve().parents[1]

TRAIN = """the cat sat on the mat
le chat était assis sur le tapis
猫 が マット の 上 に 座った
Ünïcödé wörds and émojis 🐱 🐈 are words
the dog ate the cat's food
a <b>bold</b> word and x<s>y and </s>z
the cat sat on the mat again and again
"""

HOSTILE = [
    "", " ", "\t", "\t\t \r", "\x0b\x0c", "\r\n", "   the   cat   ",
    "the\tcat\tsat", "the\rcat", "the\x0bcat\x0cmat", "the\ncat",
    "le chat était assis", "猫 が マット", "🐱 🐈 the", "Ünïcödé wörds",
    "the\u00a0cat", "the\u2003cat", "the\u3000cat", "the\u200bcat", "\ufeffthe cat",
    "<s>", "</s>", "<unk>", "<s> the cat </s>", "the <s> cat", "x<s>y", "</s>z", "<S>", "<UNK> the",
    "<b>bold</b>", "a\x00b the", "\x00", "the\x1ccat\x1dmat\x1e\x1f",
    "cat " * 1000, "the " * 5000,
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("badtext")
    text = d / "train.txt"
    text.write_text(TRAIN, encoding="utf-8")
    arpa_path = d / "m.arpa"
    nplm.estimate(str(text), 3, arpa=str(arpa_path), discount_fallback=True, progress=False)
    bin_path = d / "m.nplm"
    backoff.build_binary(arpa.read_arpa(arpa_path), bin_path)
    config = nplm.Config()
    config.arpa_complain = nplm.ARPALoadComplain.NONE
    config.show_progress = False
    return kenlm.Model(str(arpa_path)), [nplm.Model(str(arpa_path), config), nplm.Model(str(bin_path))]


def close(a, b):
    return abs(a - b) <= 2e-5 * max(1.0, abs(a))


@pytest.mark.parametrize("sentence", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize("bos,eos", [(True, True), (False, False), (True, False)])
def test_hostile_sentences_score_like_kenlm(models, sentence, bos, eos):
    ref, ours = models
    want = ref.score(sentence, bos=bos, eos=eos)
    want_full = list(ref.full_scores(sentence, bos=bos, eos=eos))
    if "\0" in sentence:
        # kenlm passes words to C++ as C strings, so "a\0b" is looked up as "a":
        # an artefact.  nplm keeps every byte: a word holding NUL is just unknown.
        ours_ref = " ".join("zzunknownzz" if "\0" in w else w for w in sentence.split(" "))
        want = ref.score(ours_ref, bos=bos, eos=eos)
        want_full = list(ref.full_scores(ours_ref, bos=bos, eos=eos))
    for model in ours:
        assert close(model.score(sentence, bos=bos, eos=eos), want)
        got_full = list(model.full_scores(sentence, bos=bos, eos=eos))
        assert len(got_full) == len(want_full)
        for g, w in zip(got_full, want_full):
            assert close(g[0], w[0]) and g[1] == w[1] and bool(g[2]) == bool(w[2]), (g, w)
        # bytes in, same answers (kenlm takes bytes unchanged)
        assert close(model.score(sentence.encode("utf-8"), bos=bos, eos=eos), want)
        # the batch kernels tokenise the same way
        batch = model.score_sentences([sentence], bos=bos, eos=eos)
        assert close(float(batch[0]), want)


@pytest.mark.parametrize("sentence", HOSTILE[:30], ids=range(30))
def test_hostile_sentences_perplexity_and_words(models, sentence):
    ref, ours = models
    for model in ours:
        assert close(model.perplexity(sentence), ref.perplexity(sentence))
        for w in sentence.split(" "):
            assert (w in model) == (w in ref), w
        state, out = nplm.State(), nplm.State()
        kstate, kout = kenlm.State(), kenlm.State()
        model.BeginSentenceWrite(state)
        ref.BeginSentenceWrite(kstate)
        for w in (w.decode("utf-8") for w in sentence.encode("utf-8").split()):
            if "\0" in w:
                continue
            assert close(model.BaseScore(state, w, out), ref.BaseScore(kstate, w, kout)), w
            state, out, kstate, kout = out, state, kout, kstate


def test_hundred_thousand_token_line(models):
    ref, ours = models
    rng = np.random.default_rng(0)
    words = TRAIN.split() + ["unknownword"]
    line = " ".join(rng.choice(words, size=100_000))
    want = ref.score(line)
    for model in ours:
        got = model.score(line)
        assert abs(got - want) <= 1e-6 * abs(want) + 1e-3, (got, want)
        full = list(model.full_scores(line))
        assert len(full) == 100_001
        np.testing.assert_allclose([f[0] for f in full], [f[0] for f in ref.full_scores(line)], atol=2e-5)


def test_invalid_utf8_bytes_are_unknown_words(models):
    ref, ours = models
    for raw in [b"\xff", b"the \xff\xfe cat", b"\xc3 the", b"\xed\xa0\x80 mat", b"the cat\x80"]:
        want = ref.score(raw)
        for model in ours:
            assert close(model.score(raw), want), raw


def test_lone_surrogates_raise_like_kenlm(models):
    ref, ours = models
    with pytest.raises(UnicodeEncodeError):
        ref.score("the \ud800 cat")
    for model in ours:
        with pytest.raises(UnicodeEncodeError):
            model.score("the \ud800 cat")
        with pytest.raises(UnicodeEncodeError):
            model.full_scores("\udfff")
        with pytest.raises(TypeError):
            model.score(None)
        with pytest.raises(TypeError):
            model.score(12)


def test_query_command_on_hostile_stdin(models, tmp_path):
    """``nplm query`` prints one line per input line, never a traceback, for any bytes."""
    _, ours = models
    model_path = ours[1].path.decode() if isinstance(ours[1].path, bytes) else ours[1].path
    lines = [s.encode("utf-8", "surrogatepass").replace(b"\n", b" ").replace(b"\r", b" ")
             for s in HOSTILE] + [b"\xff\xfe bad bytes", b"the\x00cat"]
    data = b"\n".join(lines) + b"\n"
    r = subprocess.run([sys.executable, "-m", "nplm", "query", model_path, "-v", "sentence"],
                       input=data, capture_output=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert b"Traceback" not in r.stderr
    totals = [line for line in r.stdout.split(b"\n") if line.startswith(b"Total:")]
    assert len(totals) == len(lines)
    for line, total in zip(lines, totals):
        # query's line total is a float32 sum, as score()'s (and kenlm's) is
        assert np.float32(total.split()[1].decode()) == np.float32(ours[1].score(line)), (line, total)


def _estimate(tmp_path, name, data):
    src = tmp_path / f"{name}.txt"
    src.write_bytes(data)
    out = tmp_path / f"{name}.arpa"
    nplm.estimate(str(src), 3, arpa=str(out), discount_fallback=True, progress=False)
    return out.read_bytes()


def test_estimation_whitespace_like_lmplz(tmp_path):
    """lmplz splits on space, tab, CR and NUL, and ignores runs of them."""
    clean = TRAIN.encode("utf-8")
    messy = b"\n".join(b"\t \r" + line.replace(b" ", b" \t\0 ") + b"\r" for line in clean.split(b"\n")[:-1])
    assert _estimate(tmp_path, "clean", clean) == _estimate(tmp_path, "messy", messy + b"\n")


def test_estimation_takes_any_bytes_and_rejects_markup(tmp_path):
    assert b"\t\xff\t" in _estimate(tmp_path, "latin1", b"the cat\nthe \xff dog\n")
    with pytest.raises(FormatError, match="<s>"):
        _estimate(tmp_path, "markup", b"the cat\n<s> the dog\n")
    # markup that merely contains <s> is an ordinary word
    arpa_text = _estimate(tmp_path, "inner", b"the x<s>y cat\nthe </s>z dog\n").decode()
    assert "\tx<s>y" in arpa_text and "\t</s>z" in arpa_text


def test_training_text_whitespace_and_unicode(tmp_path):
    """The neural trainer's corpus: ASCII white space separates words, as in scoring
    (KenLM's delimiters; U+00A0 stays inside a word), empty lines are empty
    sentences, invalid UTF-8 is a clear error."""
    from nplm.neural.train import Corpus
    good = tmp_path / "good.txt"
    good.write_text("le chat\tétait\u00a0assis\n\n🐱  🐈\r\nthe cat sat\n" * 3, encoding="utf-8")
    c = Corpus(str(good), None, 3)
    assert {"le", "chat", "était\u00a0assis", "🐱", "🐈"} <= set(c.vocab.words)
    assert "assis" not in c.vocab.words
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"the cat\nthe \xff dog\n")
    with pytest.raises(FormatError, match=r"bad\.txt:2: invalid UTF-8"):
        Corpus(str(bad), None, 3)
