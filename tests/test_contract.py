"""The kenlm contract, met by every model kind: back-off (ARPA and binary) and
neural models in every normalisation mode."""
import copy
import pickle
import random

import numpy as np
import pytest

import nplm
from nplm.neural.query import precompute

from helpers import REFERENCE, make_net

KINDS = ["backoff-arpa", "backoff-binary", "neural-exact", "neural-unnormalized", "neural-fallback",
         "neural-class", "neural-tree"]


@pytest.fixture(scope="module", params=KINDS)
def model(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("contract")
    kind = request.param
    if kind.startswith("backoff"):
        if not REFERENCE.is_dir():
            pytest.skip("../shared (reference ARPAs) is absent")
        arpa = str(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz")
        cfg = nplm.Config()
        cfg.show_progress = False
        if kind == "backoff-arpa":
            m = nplm.Model(arpa, cfg)
        else:
            nplm.build_binary(arpa, str(tmp / "b.nplm"))
            m = nplm.Model(str(tmp / "b.nplm"))
        words = [w for w in m.vocab.words()[3:60]]
        return m, words
    net = make_net({"neural-class": "class-full-1", "neural-tree": "tree-diag-1"}.get(kind, "softmax-full-2"))
    path = str(tmp / "n.nplm")
    net.save(path)
    mode = kind.split("-")[1]
    if mode == "fallback":
        text = tmp / "t.txt"
        rng = random.Random(0)
        text.write_text("\n".join(" ".join(f"w{rng.randrange(12)}" for _ in range(8)) for _ in range(60)))
        precompute(path, str(text), min_count=2, progress=False)
    m = nplm.Model(path, normalization=None if mode in ("class", "tree") else mode)
    return m, net.vocab.words[4:]


def sentences(words, n=25, seed=0):
    rng = random.Random(seed)
    out = [" ".join(rng.choice(words + ["zzqx"]) for _ in range(rng.randrange(0, 14))) for _ in range(n)]
    return out + ["", "  ", words[0]]


def test_score_is_sum_of_full_scores(model):
    m, words = model
    for s in sentences(words):
        for bos, eos in [(True, True), (False, True), (True, False), (False, False)]:
            items = list(m.full_scores(s, bos=bos, eos=eos))
            assert len(items) == len(s.split()) + eos
            assert m.score(s, bos=bos, eos=eos) == pytest.approx(sum(p for p, _, _ in items), abs=1e-4)
            for p, n, oov in items:
                assert p <= 0 or m.normalization == "unnormalized"
                assert 1 <= n <= m.order and isinstance(oov, bool)
            if eos:
                assert items[-1][2] is False


def test_perplexity_definition(model):
    m, words = model
    for s in sentences(words, 10, 1):
        expect = 10 ** (-m.score(s) / (len(s.split()) + 1))
        assert m.perplexity(s) == pytest.approx(expect, rel=1e-6)


def test_state_chain_equals_sentence(model):
    m, words = model
    for s in sentences(words, 15, 2):
        for bos in (True, False):
            st, out = nplm.State(), nplm.State()
            (m.BeginSentenceWrite if bos else m.NullContextWrite)(st)
            chain = []
            for w in s.split() + ["</s>"]:
                r = m.BaseFullScore(st, w, out)
                chain.append((r.log_prob, r.ngram_length, r.oov))
                st, out = out, st
            items = list(m.full_scores(s, bos=bos, eos=True))
            for (a, n, _o), (b, k, _q) in zip(chain, items):
                assert a == pytest.approx(b, abs=1e-5) and n == k
            assert [o for _, _, o in chain[:-1]] == [o for _, _, o in items[:-1]]


def test_equal_states_have_equal_futures(model):
    m, words = model
    states = []
    for s in sentences(words, 30, 3):
        st, out = nplm.State(), nplm.State()
        m.BeginSentenceWrite(st)
        for w in s.split():
            m.BaseScore(st, w, out)
            st, out = out, st
        states.append(copy.copy(st))
    probe = words[:5] + ["</s>", "zzqx"]
    for a in states:
        for b in states:
            if a == b:
                assert hash(a) == hash(b)
                o1, o2 = nplm.State(), nplm.State()
                assert [m.BaseScore(a, w, o1) for w in probe] == [m.BaseScore(b, w, o2) for w in probe]
    s = states[0]
    assert copy.deepcopy(s) == s and pickle.loads(pickle.dumps(s)) == s


def test_vocabulary_and_oov(model):
    m, words = model
    assert words[0] in m and "</s>" in m and "<s>" in m
    assert "zzqx" not in m and "<unk>" not in m
    items = list(m.full_scores(f"{words[0]} zzqx"))
    assert items[1][2] is True and items[0][2] is False
    assert m.vocab.id("zzqx") == 0


def test_batch_apis_agree(model):
    m, words = model
    lines = sentences(words, 40, 4)
    np.testing.assert_allclose(m.score_sentences(lines), [m.score(s) for s in lines], atol=1e-4)
    p, l, o, off = m.full_scores_batch(lines, bos=False, eos=True)
    flat = [x for s in lines for x in m.full_scores(s, bos=False, eos=True)]
    np.testing.assert_allclose(p, [x[0] for x in flat], atol=1e-5)
    assert l.tolist() == [x[1] for x in flat] and o.tolist() == [x[2] for x in flat]


def test_pickle_round_trip(model):
    m, words = model
    again = pickle.loads(pickle.dumps(m))
    assert repr(again) == repr(m)
    s = " ".join(words[:6])
    assert again.score(s) == pytest.approx(m.score(s), abs=1e-6)


def test_distribution_normalised(model):
    m, words = model
    st, out = nplm.State(), nplm.State()
    m.BeginSentenceWrite(st)
    m.BaseScore(st, words[1], out)
    p = 10 ** m.log10_distribution(out).astype(np.float64)
    if m.normalization is None:
        p[m.vocab.id("<s>")] = 0.0    # back-off: <s> is never predicted (log10 p = 0)
    if m.normalization == "unnormalized":
        assert np.isfinite(p).all()
    else:
        assert p.sum() == pytest.approx(1.0, abs=1e-4)
