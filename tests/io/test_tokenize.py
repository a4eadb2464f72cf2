"""One tokenizer everywhere: text becomes words at KenLM's delimiters (ASCII white space),
in training, clustering, distillation, tuning and precomputing as in scoring, so a
word with U+00A0 / U+2003 / U+3000 inside is one word in a model and when scored."""
import random
import sys

import kenlm
import numpy as np
import pytest

import nplm
from nplm.io.text import split_words

from helpers import run_cli

WORDS = ["café", "x\u00a0y", "b\u3000c", "d\u2003e", "the", "a", "of"]
ODD = ["x\u00a0y", "b\u3000c", "d\u2003e"]


def cli(*args):
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("uni")
    rng = random.Random(1)
    text = d / "uni.txt"
    text.write_text("".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 10))) + "\n"
                            for _ in range(600)), encoding="utf-8")
    arpa = d / "kn.arpa"
    cli("estimate", "-o", 3, "--text", text, "--arpa", arpa, "--discount_fallback")
    neural = d / "uni.nplm"
    cli("train", "--train", text, "--out", neural, "--order", 3, "--embedding-dim", 8, "--epochs", 1,
        "--quiet", "--output", "softmax", "--objective", "mle")
    return d, text, arpa, neural


def _quiet(path):
    c = kenlm.Config()
    c.show_progress = False
    return kenlm.Model(str(path), c)


def test_split_words_is_kenlms_split():
    every_space = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    line = "w" + "w".join(every_space) + "w end"
    assert split_words(line) == [w.decode("utf-8") for w in line.encode("utf-8").split()]
    assert split_words(line.encode("utf-8")) == line.encode("utf-8").split()
    assert split_words(" a\tb\x0bc\x0cd\re\n") == ["a", "b", "c", "d", "e"]
    # the fast path (str.split) is taken only where no other character splits
    for ch in every_space:
        assert len(split_words(f"p{ch}q")) == (2 if ch in " \t\n\x0b\x0c\r" else 1), hex(ord(ch))


def test_estimated_vocabulary_agrees_with_kenlm(corpus):
    _, _, arpa, _ = corpus
    k = _quiet(arpa)
    for w in ODD:
        assert w in k and w.split()[0] not in k
        # kenlm scores it as one known word, as nplm does
        assert [oov for _, _, oov in k.full_scores(f"the {w} a")] == [False] * 4
        assert nplm.Model(str(arpa)).score(f"the {w} a") == pytest.approx(k.score(f"the {w} a"), abs=1e-5)


def test_train_vocabulary_keeps_words_whole(corpus):
    _, text, _, neural = corpus
    m = nplm.Model(str(neural))
    for w in ODD:
        assert w in m
    assert "x" not in m and "y" not in m and "b" not in m
    # and scoring the training text finds no OOV (batched and per sentence alike)
    lines = text.read_text(encoding="utf-8").splitlines()[:50]
    probs, _, oovs, _ = m.full_scores_batch(lines)
    assert not oovs.any()
    assert sum(m.score(s) for s in lines) == pytest.approx(float(probs.astype("f8").sum()), abs=1e-3)
    out = cli("perplexity", neural, text).stdout
    assert "OOVs:\t0" in out


def test_cluster_lists_words_whole(corpus, tmp_path):
    _, text, _, _ = corpus
    for method in ("brown", "frequency"):
        out = tmp_path / f"{method}.tsv"
        cli("cluster", "--text", text, "-c", 3, "--method", method, "-o", out, "-q")
        words = {line.split("\t")[0] for line in out.read_text(encoding="utf-8").splitlines()}
        assert set(ODD) <= words and "x" not in words


def test_tune_counts_the_tokens_perplexity_counts(corpus, tmp_path):
    _, text, arpa, neural = corpus
    # a line of one U+00A0 is a word for KenLM, not a blank line to skip
    dev = tmp_path / "dev.txt"
    dev.write_text(text.read_text(encoding="utf-8") + "\u00a0\n", encoding="utf-8")
    res = nplm.interpolate([str(arpa), str(neural)]).tune(str(dev), threads=1)
    out = cli("perplexity", arpa, dev).stdout
    tokens = int(out.split("Tokens:\t")[1].split()[0])
    assert res.tokens == tokens
    assert "OOVs:\t1" in out       # the corpus's words are known; the lone U+00A0 is not


def test_distil_lists_ngrams_with_the_words(corpus, tmp_path):
    _, text, arpa, _ = corpus
    out = tmp_path / "d.arpa"
    cli("distil", arpa, "--text", text, "--order", 2, "--arpa", out, "-q")
    body = out.read_text(encoding="utf-8")
    bigrams = body.split("\\2-grams:")[1]
    for w in ODD:
        assert f" {w}" in bigrams or f"\t{w} " in bigrams
    assert "\tx " not in bigrams and " y\n" not in bigrams
    _quiet(out)  # kenlm loads it


def test_limit_vocab_file_keeps_words_whole(corpus, tmp_path):
    _, text, _, _ = corpus
    limit = tmp_path / "limit.txt"
    limit.write_text("x\u00a0y the\n", encoding="utf-8")
    out = tmp_path / "lim.arpa"
    cli("estimate", "-o", 2, "--text", text, "--arpa", out, "--limit_vocab_file", limit, "--discount_fallback")
    k = _quiet(out)
    assert "x\u00a0y" in k and "the" in k and "b\u3000c" not in k


def test_precompute_counts_contexts_with_the_words(corpus, tmp_path):
    _, text, _, neural = corpus
    out = tmp_path / "pre.nplm"
    cli("precompute", neural, "--text", text, "--min-count", 1, "--out", out)
    fb = nplm.Model(str(out), normalization="fallback")
    exact = nplm.Model(str(neural))
    # every context of the text is stored, so fallback equals exact on it
    s = "the x\u00a0y b\u3000c"
    assert fb.score(s) == pytest.approx(exact.score(s), abs=1e-4)
    assert np.isfinite(fb.score(s))
