"""Interpolated models: linear and log-linear mixtures against brute-force
references built from the components, normalisation over the union vocabulary,
kenlm.Model components, weight tuning, the JSON spec and the CLI."""
import json
import math
import pickle
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize

import nplm
from nplm.cli.main import main as cli_main
from nplm.compose import _interp
from nplm.compose.interpolate import newton, tune_linear

from helpers import DATA, REFERENCE, need_shared, quiet_config, read_lines

kenlm = pytest.importorskip("kenlm")


_quiet = quiet_config


@pytest.fixture(scope="module")
def models():
    need_shared()
    cfg = _quiet()
    return {name: nplm.Model(str(REFERENCE / f"{name}.arpa.xz"), cfg)
            for name in ("ptb5k.o3", "ptb5k.o5", "wiki3k.o5")}


@pytest.fixture(scope="module")
def kenlm_o3():
    need_shared()
    cfg = kenlm.Config()
    cfg.show_progress = False
    cfg.arpa_complain = kenlm.ARPALoadComplain.NONE
    return kenlm.Model(str(REFERENCE / "ptb5k.o3.arpa.xz"), cfg)


@pytest.fixture(scope="module")
def dev():
    need_shared()
    # PTB validation text as the references spell <unk>; a few WikiText lines mixed in
    # so that both the PTB and the WikiText component matter.
    ptb = read_lines(DATA / "ptb" / "ptb.valid.txt", limit=120)
    wiki = [l.strip() for l in read_lines(DATA / "wikitext2" / "wiki.valid.tokens", limit=400)
            if l.strip() and not l.strip().startswith("=")][:40] if (DATA / "wikitext2").is_dir() else []
    return ptb + wiki


SENTENCES = ["the company said it expects to report a loss", "UNK shares rose N cents",
             "zzqx unknown words qqq", "", "the the the", "of the new year the stock market fell sharply"]


def _after(model, words, bos=True):
    s, o = nplm.State(), nplm.State()
    (model.BeginSentenceWrite if bos else model.NullContextWrite)(s)
    for w in words:
        model.BaseScore(s, w, o)
        s, o = o, s
    return s


def _component_dists(mix, comps, words, bos=True):
    """Each component's log10 distribution after ``words``, laid out over the
    mixture's vocabulary by word (independently of the mixture's own maps)."""
    union = mix.vocab.words()
    out = []
    for c in comps:
        d = c.log10_distribution(_after(c, words, bos)).astype(np.float64)
        ids = np.array([0 if w == "<unk>" else c.vocab.id(w) for w in union])
        out.append(d[ids])
    return np.array(out), ids


def _reference(mode, weights, comp, bos_id, split_pen=None):
    """Brute-force mixture distribution (log10) from component distributions."""
    w = np.asarray(weights, dtype=np.float64)[:, None]
    if split_pen is not None:
        comp = comp + split_pen
    if mode == "linear":
        return np.log10((w * 10.0 ** comp).sum(axis=0))
    s = (w * comp).sum(axis=0)
    if mode == "loglinear-unnormalised":
        return s
    keep = np.ones(len(s), bool)
    keep[bos_id] = False
    return s - np.log10((10.0 ** s[keep]).sum())


def _total(dist, model):
    d = dist.astype(np.float64).copy()
    d[model.vocab.id("<s>")] = -np.inf
    return float((10.0 ** d).sum())


# --- a component alone ----------------------------------------------------------------


@pytest.mark.parametrize("mode,normalize", [("linear", True), ("loglinear", False)])
@pytest.mark.parametrize("which", [0, 1])
def test_weight_one_reproduces_a_component_exactly(models, mode, normalize, which):
    comps = [models["ptb5k.o3"], models["ptb5k.o5"]]
    weights = [1.0, 0.0] if which == 0 else [0.0, 1.0]
    mix = nplm.interpolate(comps, weights, mode, normalize=normalize)
    ref = comps[which]
    for s in SENTENCES:
        for bos, eos in [(True, True), (False, False), (True, False)]:
            assert list(mix.full_scores(s, bos, eos)) == list(ref.full_scores(s, bos, eos))
        assert mix.score(s) == ref.score(s)
    # the same vocabulary in the same order, so even the states agree
    words = SENTENCES[0].split()
    for k in range(len(words) + 1):
        assert _after(mix, words[:k]) == _after(ref, words[:k])


@pytest.mark.parametrize("pair,unknown", [(("ptb5k.o3", "ptb5k.o5"), "unk"),
                                          (("ptb5k.o5", "wiki3k.o5"), "split")])
def test_normalised_loglinear_of_one_component_is_that_component(models, pair, unknown):
    # (With "unk" and different vocabularies Z also counts the <unk> probability once
    # per word the component lacks, so only "split" reproduces it there.)
    mix = nplm.interpolate([models[p] for p in pair], [1.0, 0.0], "loglinear", unknown=unknown)
    ref = models[pair[0]]
    lacks = sum(1 for w in mix.vocab.words() if w == "<unk>" or w not in ref)
    for s in SENTENCES[:3]:
        got = np.array([p for p, _, _ in mix.full_scores(s)])
        exp = np.array([p for p, _, _ in ref.full_scores(s)])
        oov = np.array([o for _, _, o in ref.full_scores(s)])
        if unknown == "split":      # a word it lacks gets an even share of its <unk> mass
            exp[oov] -= np.log10(lacks)
        # Z(h) = sum of the component's own probabilities = 1 up to float32 tables
        np.testing.assert_allclose(got, exp, atol=2e-5)


# --- distributions against brute force -------------------------------------------------

CONTEXTS = [([], True), (["the"], True), (["the", "company", "said"], True),
            (["UNK", "shares"], True), ([], False), (["market", "zzqx"], False)]


@pytest.mark.parametrize("pair", [("ptb5k.o3", "ptb5k.o5"), ("ptb5k.o5", "wiki3k.o5")])
@pytest.mark.parametrize("mode", ["linear", "loglinear", "loglinear-unnormalised"])
@pytest.mark.parametrize("unknown", ["unk", "split"])
def test_distribution_matches_brute_force(models, pair, mode, unknown):
    comps = [models[pair[0]], models[pair[1]]]
    weights = [0.35, 0.65] if mode == "linear" else [0.7, 0.55]
    mix = nplm.interpolate(comps, weights, "linear" if mode == "linear" else "loglinear",
                           normalize=mode != "loglinear-unnormalised", unknown=unknown)
    union = mix.vocab.words()
    assert union[0] == "<unk>" and len(set(union)) == len(union)
    assert set(union) >= set(comps[0].vocab.words()[1:]) | set(comps[1].vocab.words()[1:])
    bos_id = mix.vocab.id("<s>")
    for words, bos in CONTEXTS[:4] if mode == "loglinear" else CONTEXTS:
        comp, _ = _component_dists(mix, comps, words, bos)
        pen = None
        if unknown == "split":
            lacks = np.array([[u == 0 or w not in c for u, w in enumerate(union)] for c in comps])
            pen = np.where(lacks, -np.log10(lacks.sum(axis=1))[:, None], 0.0)
        ref = _reference(mode, weights, comp, bos_id, pen)
        got = mix.log10_distribution(_after(mix, words, bos)).astype(np.float64)
        keep = np.arange(len(union)) != bos_id
        np.testing.assert_allclose(got[keep], ref[keep], atol=3e-5, rtol=1e-5)


@pytest.mark.parametrize("pair,unknown", [(("ptb5k.o3", "ptb5k.o5"), "unk"),
                                          (("ptb5k.o5", "wiki3k.o5"), "split")])
def test_linear_mixture_sums_to_one(models, pair, unknown):
    mix = nplm.interpolate([models[p] for p in pair], [0.3, 0.7], unknown=unknown)
    for words, bos in CONTEXTS:
        assert _total(mix.log10_distribution(_after(mix, words, bos)), mix) == pytest.approx(1.0, abs=1e-4)


def test_linear_unk_rule_with_different_vocabularies_counts_unk_mass_per_missing_word(models):
    # The documented consequence of giving a missing word the component's <unk>
    # probability: the sum exceeds one by each component's <unk> mass per word it lacks.
    comps = [models["ptb5k.o5"], models["wiki3k.o5"]]
    with pytest.warns(UserWarning, match="not normalised"):
        mix = nplm.interpolate(comps, [0.3, 0.7], unknown="unk")
    for words, bos in CONTEXTS[:3]:
        total = _total(mix.log10_distribution(_after(mix, words, bos)), mix)
        extra = 0.0
        for lam, c in zip([0.3, 0.7], comps):
            missing = sum(1 for w in mix.vocab.words()[1:] if w not in c)
            p_unk = 10.0 ** float(c.log10_distribution(_after(c, words, bos))[0])
            extra += lam * missing * p_unk
        assert total == pytest.approx(1.0 + extra, abs=1e-4)
        assert total > 1.0


def test_default_linear_mixture_of_different_vocabularies_sums_to_one(models):
    comps = [models["ptb5k.o5"], models["wiki3k.o5"]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the default policy is normalised: no notice
        mix = nplm.interpolate(comps, [0.3, 0.7])
    assert mix.unknown == "split"
    union = mix.vocab.words()
    assert all(sum(1 for w in union[1:] if w not in c) > 100 for c in comps)   # really different
    for words, bos in CONTEXTS:
        assert _total(mix.log10_distribution(_after(mix, words, bos)), mix) == pytest.approx(1.0, abs=1e-5)


def test_unk_rule_linear_mixture_warns_with_the_sum_and_tuning_it_is_refused(models, dev):
    comps = [models["ptb5k.o5"], models["wiki3k.o5"]]
    union_size = len(nplm.interpolate(comps).vocab) - 1
    lacks = [sum(1 for w in nplm.interpolate(comps).vocab.words()[1:] if w not in c) for c in comps]
    with pytest.warns(UserWarning) as rec:
        mix = nplm.interpolate(comps, unknown="unk")
    msg = str(rec[0].message)
    total = _total(mix.log10_distribution(_after(mix, [], True)), mix)
    assert f"component 0 (ptb5k.o5.arpa.xz) lacks {lacks[0]} of the {union_size} words" in msg
    assert f"component 1 (wiki3k.o5.arpa.xz) lacks {lacks[1]} of the {union_size} words" in msg
    assert f"sums to {total:.4g}" in msg and total > 1.01
    with pytest.raises(ValueError, match="refusing to tune.*allow_unnormalised"):
        mix.tune(dev)
    assert mix.tune(dev, allow_unnormalised=True).perplexity > 0          # when asked
    # log-linear renormalises: no notice
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nplm.interpolate(comps, mode="loglinear", unknown="unk")


def test_default_tuned_weights_minimise_the_honest_dev_perplexity_brute_force(models, dev):
    # Each component's per-token log10 p from its own full_scores; a word it lacks
    # (oov) gets its <unk> probability divided among the k union words it lacks.
    comps = [models["ptb5k.o5"], models["wiki3k.o5"]]
    mix = nplm.interpolate(comps)
    union = mix.vocab.words()
    lp = []
    for c in comps:
        k = 1 + sum(1 for w in union[1:] if w not in c)
        lp.append([p - (math.log10(k) if oov else 0.0) for s in dev for p, _, oov in c.full_scores(s)])
    p = 10.0 ** np.array(lp)
    grid = np.linspace(0.0, 1.0, 1001)
    ppl = [10.0 ** (-np.log10(g * p[0] + (1 - g) * p[1]).mean()) for g in grid]
    best = int(np.argmin(ppl))
    res = mix.tune(dev)
    assert abs(res.weights[0] - grid[best]) <= 2e-3
    assert res.perplexity <= ppl[best] * (1 + 1e-6)
    honest = 10.0 ** (-np.log10(res.weights @ p).mean())
    assert res.perplexity == pytest.approx(honest, rel=1e-5)
    assert _ppl(mix, dev) == pytest.approx(honest, rel=1e-5)


@pytest.mark.parametrize("pair", [("ptb5k.o3", "ptb5k.o5"), ("ptb5k.o5", "wiki3k.o5")])
@pytest.mark.parametrize("weights", [[0.6, 0.8], [1.5, -0.3]])
def test_normalised_loglinear_sums_to_one(models, pair, weights):
    mix = nplm.interpolate([models[p] for p in pair], weights, "loglinear")
    for words, bos in CONTEXTS[:4]:
        assert _total(mix.log10_distribution(_after(mix, words, bos)), mix) == pytest.approx(1.0, abs=1e-5)


# --- sentence scoring against the components -------------------------------------------


@pytest.mark.parametrize("mode", ["linear", "loglinear-unnormalised"])
def test_sentence_scores_match_components(models, mode):
    comps = [models["ptb5k.o5"], models["wiki3k.o5"]]
    w = np.array([0.4, 0.6])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # (linear under the unk rule: not normalised)
        mix = nplm.interpolate(comps, w, "linear" if mode == "linear" else "loglinear", normalize=False,
                               unknown="unk")
    for s in SENTENCES:
        for bos, eos in [(True, True), (False, True), (True, False)]:
            # each component on its own sees a word it lacks as <unk>: the mixture's rule
            per = np.array([[p for p, _, _ in c.full_scores(s, bos, eos)] for c in comps])
            ref = np.log10(w @ 10.0 ** per) if mode == "linear" else w @ per
            items = list(mix.full_scores(s, bos, eos))
            np.testing.assert_allclose([p for p, _, _ in items], ref, atol=2e-5)
            assert [o for _, _, o in items] == [o for _, _, o in comps[0].full_scores(s, bos, eos)] or \
                any(t not in comps[0] for t in s.split())
            for (_, n, _), n0, n1 in zip(items, *[[n for _, n, _ in c.full_scores(s, bos, eos)] for c in comps]):
                assert n == max(n0, n1)
            assert mix.score(s, bos, eos) == pytest.approx(float(np.sum(ref)), abs=1e-4)


def test_kenlm_api_consistency(models):
    mix = nplm.interpolate([models["ptb5k.o3"], models["wiki3k.o5"]], [0.5, 0.5], "linear")
    st = nplm.State()
    for s in SENTENCES:
        words = s.split()
        total, state, out = 0.0, nplm.State(), nplm.State()
        mix.BeginSentenceWrite(state)
        for w in words + ["</s>"]:
            r = mix.BaseFullScore(state, w, out)
            total += r.log_prob
            state, out = out, state
        assert total == pytest.approx(mix.score(s), abs=1e-4)
        assert mix.perplexity(s) == pytest.approx(10 ** (-mix.score(s) / (len(words) + 1)), rel=1e-5)
    mix.NullContextWrite(st)
    assert st.length == 0
    assert "the" in mix and "zzqx" not in mix and "<unk>" not in mix
    # states: equal contexts compare equal; the mixture's context_state equals the chain
    a = _after(mix, ["we", "said", "the"])
    b = _after(mix, ["they", "said", "the"])
    if a == b:
        assert hash(a) == hash(b)
        assert mix.log10_distribution(a).tolist() == mix.log10_distribution(b).tolist()
    ids = [mix.vocab.id(w) for w in ["<s>", "the", "company", "said"]]
    assert mix.core.state_for(ids) == _after(mix, ["the", "company", "said"])
    # batch APIs agree with the per-sentence ones
    sc = mix.score_sentences(SENTENCES)
    np.testing.assert_allclose(sc, [mix.score(s) for s in SENTENCES], atol=1e-4)
    probs, lengths, oov, off = mix.full_scores_batch(SENTENCES)
    for i, s in enumerate(SENTENCES):
        assert probs[off[i]:off[i + 1]].tolist() == pytest.approx([p for p, _, _ in mix.full_scores(s)])


def test_nested_linear_mixture_equals_the_flat_one(models, tmp_path):
    a, b, c = models["wiki3k.o5"], models["ptb5k.o3"], models["ptb5k.o5"]
    inner = nplm.interpolate([b, c], [0.6, 0.4])
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="not normalised"):
        # different vocabularies under the "unk" rule
        nplm.interpolate([nplm.interpolate([a, b], [0.5, 0.5], unknown="unk"), c], [0.5, 0.5])
    ok = nplm.interpolate([nplm.interpolate([a, b], [0.5, 0.5]), c], [0.5, 0.5])   # "split": normalised
    for words, bos in CONTEXTS[:3]:
        assert _total(ok.log10_distribution(_after(ok, words, bos)), ok) == pytest.approx(1.0, abs=1e-5)
    nested = nplm.interpolate([a, inner], [0.3, 0.7])
    flat = nplm.interpolate([a, b, c], [0.3, 0.7 * 0.6, 0.7 * 0.4])
    for s in SENTENCES:
        np.testing.assert_allclose([p for p, _, _ in nested.full_scores(s)],
                                   [p for p, _, _ in flat.full_scores(s)], atol=2e-6)
    with pytest.raises(ValueError, match="without a file"):
        nested.save(str(tmp_path / "n.json"))


def test_threads_and_a_tiny_cache_give_the_same_normalised_scores(models):
    comps = [models["ptb5k.o3"], models["ptb5k.o5"]]
    lines = read_lines(DATA / "ptb" / "ptb.valid.txt", limit=6)
    one = nplm.interpolate(comps, [0.5, 0.6], "loglinear").score_sentences(lines, threads=1)
    tiny = nplm.interpolate(comps, [0.5, 0.6], "loglinear", cache_entries=4)
    two = tiny.score_sentences(lines * 3, threads=2)
    np.testing.assert_allclose(two, np.tile(one, 3), atol=1e-4)
    assert tiny.core.z_misses > 0


# --- kenlm.Model components ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["linear", "loglinear"])
def test_kenlm_component_equals_the_same_arpa_in_nplm(models, kenlm_o3, mode):
    lines = SENTENCES + read_lines(DATA / "ptb" / "ptb.valid.txt", limit=15 if mode == "linear" else 2)
    via_kenlm = nplm.interpolate([kenlm_o3, models["ptb5k.o5"]], [0.4, 0.6], mode)
    via_nplm = nplm.interpolate([models["ptb5k.o3"], models["ptb5k.o5"]], [0.4, 0.6], mode)
    assert via_kenlm.vocab.words() == via_nplm.vocab.words()
    for s in lines[:len(SENTENCES) + (15 if mode == "linear" else 2)]:
        a = list(via_kenlm.full_scores(s))
        b = list(via_nplm.full_scores(s))
        np.testing.assert_allclose([p for p, _, _ in a], [p for p, _, _ in b], atol=1e-5)
        assert [(n, o) for _, n, o in a] == [(n, o) for _, n, o in b]


def _kenlm_of_a_binary(tmp_path):
    # No KenLM binary is at hand: a kenlm.Model whose (writable) path names a file
    # starting with KenLM's binary magic, which is what the adapter reads.
    cfg = kenlm.Config()
    cfg.show_progress = False
    cfg.arpa_complain = kenlm.ARPALoadComplain.NONE
    km = kenlm.Model(str(REFERENCE / "ptb5k.o3.arpa.xz"), cfg)
    fake = tmp_path / "model.klm"
    fake.write_bytes(b"mmap lm http://kheafield.com/code format version 5\n\0" + bytes(64))
    km.path = str(fake).encode()
    return km


def test_kenlm_only_mixture_lists_an_arpa_vocabulary_and_needs_vocab_for_a_binary(models, kenlm_o3, tmp_path):
    ref = models["ptb5k.o3"]
    km = _kenlm_of_a_binary(tmp_path)
    with pytest.warns(UserWarning, match="KenLM binary.*vocab="), pytest.raises(ValueError, match="vocab="):
        nplm.interpolate([km])
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # given vocab=, no notice
        mixes = [nplm.interpolate([kenlm_o3]), nplm.interpolate([km], vocab=ref.vocab.words())]
    assert mixes[0].vocab.words() == ref.vocab.words()        # the ARPA's unigrams, in file order
    for mix in mixes:
        for s in SENTENCES + read_lines(DATA / "ptb" / "ptb.valid.txt", limit=10):
            a, b = list(mix.full_scores(s)), list(ref.full_scores(s))
            np.testing.assert_allclose([p for p, _, _ in a], [p for p, _, _ in b], atol=1e-6)
            assert [(n, o) for _, n, o in a] == [(n, o) for _, n, o in b]
            # and kenlm itself agrees
            assert mix.score(s) == pytest.approx(kenlm_o3.score(s), abs=1e-4)


def test_words_only_an_arpa_backed_kenlm_model_knows_are_words_of_the_mixture(models, kenlm_o3, tmp_path):
    # ptb5k.o3 (as kenlm.Model) + wiki3k.o5: as the mixture of the two paths, PTB-only
    # words included; through a KenLM binary they are <unk> (as documented).
    wiki = models["wiki3k.o5"]
    via_kenlm = nplm.interpolate([kenlm_o3, wiki], [0.5, 0.5])
    via_path = nplm.interpolate([models["ptb5k.o3"], wiki], [0.5, 0.5])
    assert via_kenlm.vocab.words() == via_path.vocab.words()
    ptb_only = [w for w in models["ptb5k.o3"].vocab.words()[3:] if w not in wiki][:30]
    assert len(ptb_only) == 30
    lines = [" ".join(ptb_only[i:i + 6]) for i in range(0, 30, 6)] + SENTENCES
    for s in lines:
        a, b = list(via_kenlm.full_scores(s)), list(via_path.full_scores(s))
        np.testing.assert_allclose([p for p, _, _ in a], [p for p, _, _ in b], atol=1e-5)
        assert [(n, o) for _, n, o in a] == [(n, o) for _, n, o in b]
    assert not any(o for _, _, o in via_kenlm.full_scores(lines[0], eos=False))
    with pytest.warns(UserWarning, match="KenLM binary"):
        blind = nplm.interpolate([_kenlm_of_a_binary(tmp_path), wiki], [0.5, 0.5])
    assert all(o for _, _, o in blind.full_scores(lines[0], eos=False))


# --- tuning -------------------------------------------------------------------------------


def _ppl(model, lines):
    probs, _, _, _ = model.full_scores_batch(lines)
    return 10.0 ** (-probs.astype(np.float64).sum() / len(probs))


def test_em_tuning_beats_every_component_and_uniform_weights(models, dev):
    comps = [models["ptb5k.o5"], models["wiki3k.o5"]]
    mix = nplm.interpolate(comps)
    uniform = _ppl(mix, dev)
    res = mix.tune(dev)
    tuned = _ppl(mix, dev)
    assert tuned == pytest.approx(res.perplexity, rel=1e-5)
    assert res.start_perplexity == pytest.approx(uniform, rel=1e-5)
    assert tuned < uniform and all(tuned < _ppl(c, dev) for c in comps)
    # EM reached the optimum: no nearby weights do better
    w = mix.weights
    assert w.sum() == pytest.approx(1.0) and (w > 0).all()
    for d in (-0.02, 0.02):
        mix.weights = np.clip(w + [d, -d], 0, 1)
        assert _ppl(mix, dev) >= tuned * (1 - 1e-6)


def test_em_is_monotone_and_finds_a_known_mixture():
    rng = np.random.default_rng(0)
    # Two "components" over 3 outcomes and data drawn from 0.25 / 0.75 of them.
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])
    mixture = 0.25 * p[0] + 0.75 * p[1]
    x = rng.choice(3, size=200000, p=mixture)
    lp = np.log10(p[:, x])
    res = tune_linear(lp, tol=1e-12)
    np.testing.assert_allclose(res.weights, [0.25, 0.75], atol=0.01)
    prev = -np.inf
    for it in range(1, 6):   # log-likelihood never decreases
        r = tune_linear(lp, max_iter=it, tol=-1)
        assert -math.log(r.perplexity) >= prev - 1e-12
        prev = -math.log(r.perplexity)


def test_loglinear_tuning_beats_every_component_and_uniform_weights(models, dev):
    # One vocabulary (7k words, which keeps this quick), so that weights (1, 0) and
    # (0, 1) are exactly the components and their perplexities compare.
    comps = [models["ptb5k.o3"], models["ptb5k.o5"]]
    lines = dev[:30]
    mix = nplm.interpolate(comps, mode="loglinear")
    uniform = _ppl(mix, lines)
    res = mix.tune(lines, threads=2)
    assert not res.sampled
    tuned = _ppl(mix, lines)
    assert tuned == pytest.approx(res.perplexity, rel=1e-4)      # the tuner's objective is exact
    assert res.start_perplexity == pytest.approx(uniform, rel=1e-4)
    singles = [_ppl(c, lines) for c in comps]   # = weights (1, 0) and (0, 1), normalised
    assert tuned < uniform and tuned < min(singles)


def test_loglinear_objective_against_numpy_and_finite_differences():
    rng = np.random.default_rng(1)
    C, n, V, skip = 4, 3, 40, 5
    F = np.log10(rng.dirichlet(np.ones(V), size=(C, n))).astype(np.float32)
    counts = rng.integers(1, 5, C).astype(np.float64)
    w = np.array([0.5, -0.2, 0.9])
    lnz, e1, cov = _interp.loglinear_objective(F, counts, w, skip, 2)
    f = F.astype(np.float64) * math.log(10)
    f[:, :, skip] = np.nan
    ref_lnz, ref_e1, ref_cov = 0.0, np.zeros(n), np.zeros((n, n))
    for c in range(C):
        keep = np.arange(V) != skip
        fc = f[c][:, keep]
        s = w @ fc
        z = np.exp(s).sum()
        q = np.exp(s) / z
        ref_lnz += counts[c] * math.log(z)
        mean = fc @ q
        ref_e1 += counts[c] * mean
        ref_cov += counts[c] * ((fc * q) @ fc.T - np.outer(mean, mean))
    assert lnz == pytest.approx(ref_lnz, rel=1e-9)
    np.testing.assert_allclose(e1, ref_e1, rtol=1e-9)
    np.testing.assert_allclose(cov, ref_cov, rtol=1e-8, atol=1e-10)
    # the gradient of sum ln Z is the expectation; its Hessian the covariance
    h = 1e-6
    for i in range(n):
        d = np.zeros(n)
        d[i] = h
        up = _interp.loglinear_objective(F, counts, w + d, skip, 1)
        dn = _interp.loglinear_objective(F, counts, w - d, skip, 1)
        assert (up[0] - dn[0]) / (2 * h) == pytest.approx(e1[i], rel=1e-5)
        np.testing.assert_allclose((up[1] - dn[1]) / (2 * h), cov[i], rtol=1e-4, atol=1e-6)


def test_newton_minimises_a_convex_function():
    a = np.array([[3.0, 1.0], [1.0, 2.0]])
    b = np.array([1.0, -2.0])

    def f(x):   # log-sum-exp plus a quadratic: convex, minimum known numerically
        v = np.logaddexp(x[0], x[1]) + 0.5 * x @ a @ x - b @ x
        s = np.exp(x - np.logaddexp(x[0], x[1]))
        return v, s + a @ x - b, np.diag(s) - np.outer(s, s) + a

    x, v, it = newton(f, np.zeros(2))
    assert np.linalg.norm(f(x)[1]) < 1e-6 and it < 20
    ref = minimize(lambda y: f(y)[:2], np.ones(2), jac=True, method="BFGS", tol=1e-12)
    np.testing.assert_allclose(x, ref.x, atol=1e-6)


# --- spec, CLI and errors -------------------------------------------------------------------


def test_spec_round_trip_through_nplm_model(reference_binaries, tmp_path):
    comps = [reference_binaries["ptb5k.o3"], reference_binaries["wiki3k.o5"]]
    for mode, normalize in [("linear", True), ("loglinear", False)]:
        mix = nplm.interpolate(comps, [0.3, 0.7], mode, normalize=normalize, unknown="split")
        spec = tmp_path / f"{mode}.json"
        mix.save(str(spec), note="test")
        data = json.loads(spec.read_text())
        assert data["nplm"] == "interpolation" and data["weights"] == [0.3, 0.7] and data["note"] == "test"
        loaded = nplm.Model(str(spec), _quiet())
        for s in SENTENCES:
            assert list(loaded.full_scores(s)) == list(mix.full_scores(s))
    again = pickle.loads(pickle.dumps(mix))
    assert again.score(SENTENCES[0]) == mix.score(SENTENCES[0])


def test_spec_of_a_kenlm_component_reloads_its_file_in_nplm(models, kenlm_o3, tmp_path):
    mix = nplm.interpolate([kenlm_o3, models["ptb5k.o5"]], [0.25, 0.75])
    spec = tmp_path / "k.json"
    mix.save(str(spec))
    assert json.loads(spec.read_text())["models"][0] == str(REFERENCE / "ptb5k.o3.arpa.xz")
    loaded = nplm.Model(str(spec), _quiet())
    for s in SENTENCES:
        np.testing.assert_allclose([p for p, _, _ in loaded.full_scores(s)],
                                   [p for p, _, _ in mix.full_scores(s)], atol=1e-6)


def test_cli_tunes_and_writes_a_spec(reference_binaries, tmp_path, dev, capsys):
    text = tmp_path / "dev.txt"
    text.write_text("\n".join(dev[:60]) + "\n")
    out = tmp_path / "combo.json"
    a, b = reference_binaries["ptb5k.o5"], reference_binaries["wiki3k.o5"]
    assert cli_main(["interpolate", "--model", a, "--model", b, "--tune", str(text), "--out", str(out)]) == 0
    spec = json.loads(out.read_text())
    assert spec["mode"] == "linear" and sum(spec["weights"]) == pytest.approx(1.0)
    assert "dev perplexity" in capsys.readouterr().err
    m = nplm.Model(str(out), _quiet())
    assert _ppl(m, dev[:60]) == pytest.approx(spec["dev_perplexity"], rel=1e-5)
    assert cli_main(["perplexity", str(out), str(text)]) == 0
    assert cli_main(["interpolate", "--model", a, "--model", b, "--weight", "1", "--out", str(out)]) == 1
    assert cli_main(["interpolate", "--model", a, "--model", b, "--weight", "0.8", "--weight", "0.4",
                     "--mode", "loglinear", "--unnormalized", "--unknown", "split", "--out", str(out)]) == 0
    spec = json.loads(out.read_text())
    assert (spec["mode"], spec["normalize"], spec["unknown"], spec["weights"]) == \
        ("loglinear", False, "split", [0.8, 0.4])
    m = nplm.Model(str(out), _quiet())
    ref = nplm.interpolate([a, b], [0.8, 0.4], "loglinear", normalize=False, unknown="split")
    assert m.score(SENTENCES[0]) == ref.score(SENTENCES[0])


def test_max_contexts_must_be_positive(reference_binaries, tmp_path, dev, capsys):
    a, b = reference_binaries["ptb5k.o3"], reference_binaries["wiki3k.o5"]
    mix = nplm.interpolate([a, b], mode="loglinear")
    for bad in (0, -5, 2.5, True, "3"):
        with pytest.raises(ValueError, match="max_contexts="):
            mix.tune(dev[:5], max_contexts=bad)
    with pytest.raises(ValueError, match="memory_mib="):
        mix.tune(dev[:5], memory_mib=0)
    assert mix.tune(dev[:5], max_contexts=1).tokens >= 1          # one context and its tokens
    text = tmp_path / "dev.txt"
    text.write_text("\n".join(dev[:5]) + "\n")
    for bad in ("0", "-5"):
        assert cli_main(["interpolate", "--mode", "loglinear", "--tune", str(text), "--max-contexts", bad,
                         "--model", a, "--model", b, "--out", str(tmp_path / "x.json")]) == 1
        err = capsys.readouterr().err
        assert f"--max-contexts {bad}: expected a positive number" in err and "Traceback" not in err


def test_a_spec_cycle_is_an_error_naming_it(reference_binaries, tmp_path, capsys):
    import os
    import subprocess
    import sys

    def spec(name, models):
        (tmp_path / name).write_text(json.dumps({"nplm": "interpolation", "version": 1, "mode": "linear",
                                                 "models": models, "weights": [1 / len(models)] * len(models)}))
        return str(tmp_path / name)
    me = spec("self.json", ["self.json"])
    a = spec("a.json", ["b.json"])
    b = spec("b.json", [reference_binaries["ptb5k.o3"], "a.json"])
    for path, cycle in [(me, f"({me} -> {me})"), (a, f"({a} -> {b} -> {a})")]:
        with pytest.raises(nplm.ModelLoadError, match="cycle") as e:
            nplm.Model(path, _quiet())
        assert isinstance(e.value, nplm.FormatError) and cycle in str(e.value)
        with pytest.raises(nplm.FormatError, match="cycle"):
            nplm.interpolate([path, reference_binaries["ptb5k.o3"]])
        for args in (["verify", path], ["interpolate", "--model", path, "--model", reference_binaries["ptb5k.o3"],
                                         "--out", str(tmp_path / "x.json")]):
            assert cli_main(args) != 0
            err = capsys.readouterr().err
            assert cycle in err and "Traceback" not in err
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(nplm.__file__)))
        run = subprocess.run([sys.executable, "-m", "nplm", "query", path], input="the\n", env=env,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 1 and cycle in run.stderr and "Traceback" not in run.stderr
    # a spec used twice, without a cycle, is fine
    ok = spec("ok.json", ["b2.json", "b2.json"])
    spec("b2.json", [reference_binaries["ptb5k.o3"]])
    assert nplm.Model(ok, _quiet()).score("the") == pytest.approx(
        nplm.Model(reference_binaries["ptb5k.o3"]).score("the"), abs=1e-5)


@pytest.mark.parametrize("content,needle", [
    ('{"nplm": "interpolation", "version": 1, "mode": "linear", "models": [], "weights": []}', "models"),
    ('{"nplm": "interpolation", "version": 1, "mode": "cubic", "models": ["a"], "weights": [1]}', "mode"),
    ('{"nplm": "interpolation", "version": 1, "mode": "linear", "models": ["a", "b"], "weights": [1]}',
     "weights"),
    ('{"nplm": "interpolation", "version": 7, "mode": "linear", "models": ["a"], "weights": [1]}', "version"),
    ('{"nplm": "interpolation", "version": 1,\n "mode": "linear" "models"}', ":2"),
    ('{"nplm": "interpolation", "version": 1, "mode": "linear", "models": ["missing.arpa"], '
     '"weights": [1]}', "missing.arpa"),
])
def test_bad_specs_name_the_file_and_the_problem(tmp_path, content, needle):
    spec = tmp_path / "bad.json"
    spec.write_text(content)
    with pytest.raises(nplm.ModelLoadError) as e:
        nplm.Model(str(spec), _quiet())
    assert "bad.json" in str(e.value) and needle in str(e.value)


UNNORMALISED_ARPA = """\\data\\
ngram 1=5
ngram 2=2

\\1-grams:
-0.5\t<unk>\t0
-99\t<s>\t-0.1
-0.2\t</s>\t0
-0.3\ta\t-0.1
-0.3\tb\t0

\\2-grams:
-0.1\t<s> a
-0.1\ta b

\\end\\
"""


def test_linear_refuses_an_unnormalised_component(models, tmp_path):
    path = tmp_path / "unnorm.arpa"
    path.write_text(UNNORMALISED_ARPA)
    bad = nplm.Model(str(path), _quiet())
    with pytest.raises(ValueError, match="not normalised.*loglinear"):
        nplm.interpolate([models["ptb5k.o3"], bad], [0.5, 0.5])
    # log-linear mixtures accept it, and normalise the result
    mix = nplm.interpolate([models["ptb5k.o3"], bad], [0.5, 0.5], "loglinear")
    assert _total(mix.log10_distribution(_after(mix, ["a"])), mix) == pytest.approx(1.0, abs=1e-5)


def test_argument_errors(models, kenlm_o3):
    a, b = models["ptb5k.o3"], models["ptb5k.o5"]
    with pytest.raises(ValueError, match="3 weights for 2"):
        nplm.interpolate([a, b], [0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match="sum to 1"):
        nplm.interpolate([a, b], [0.2, 0.3])
    assert nplm.interpolate([a, b], [0.33333, 0.66667]).weights.sum() == 1.0
    with pytest.raises(ValueError, match="non-negative"):
        nplm.interpolate([a, b], [1.2, -0.2])
    with pytest.raises(ValueError, match="mode"):
        nplm.interpolate([a, b], mode="geometric")
    with pytest.raises(ValueError, match="unknown="):
        nplm.interpolate([a, b], unknown="drop")
    with pytest.raises(ValueError, match="non-zero"):
        nplm.interpolate([a, b], [0, 0], "loglinear")
    with pytest.raises(TypeError, match="cannot interpolate"):
        nplm.interpolate([a, 3])
    with pytest.raises(ValueError, match="at least one"):
        nplm.interpolate([])
    with pytest.raises(ValueError, match="empty"):
        nplm.interpolate([a, b]).tune([])


# --- a neural component (the lead's NeuralCore) ---------------------------------------------


@pytest.fixture(scope="module", params=["softmax-full-2", "class-diag-2", "tree-full-1",
                                        "softmax-full-2+shortlist", "class-diag-2+shortlist-input",
                                        "tree-full-1+shortlist"])
def neural_pair(request, tmp_path_factory):
    """A small random neural model (some with a shortlist output layer of 12 words:
    w12..w36 share the out-of-shortlist unit) and a KN model over the same words."""
    import random

    from helpers import make_net
    tmp = tmp_path_factory.mktemp("nnmix")
    kind, _, shortlist = request.param.partition("+")
    net = make_net(kind, **({"shortlist": 12, "shortlist_input": shortlist.endswith("input")} if shortlist else {}))
    nn_path = str(tmp / "n.nplm")
    net.save(nn_path)
    rng = random.Random(3)
    text = tmp / "t.txt"
    text.write_text("\n".join(" ".join(f"w{rng.randrange(20)}" for _ in range(rng.randrange(3, 9)))
                              for _ in range(400)) + "\n")
    kn_path = str(tmp / "kn.arpa")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # "substituting fallback discounts": intended
        nplm.estimate(str(text), 3, arpa=kn_path, discount_fallback=True, progress=False)
    return nplm.Model(kn_path, _quiet()), nn_path


def test_neural_component_mixtures(neural_pair):
    kn, nn_path = neural_pair
    nn = nplm.Model(nn_path)
    raw = nplm.Model(nn_path, normalization="unnormalized")
    contexts = [([], True), (["w1", "w2"], True), (["w5", "w30", "w3"], False)]
    for mode in ["linear", "loglinear"]:
        mix = nplm.interpolate([kn, nn], [0.4, 0.6], mode, unknown="split")
        # the neural vocabulary joins the union, without its padding id
        assert set(mix.vocab.words()) == set(kn.vocab.words()) | set(nn.vocab.words()) - {"<null>"}
        bos_id = mix.vocab.id("<s>")
        for words, bos in contexts:
            comp, _ = _component_dists(mix, [kn, nn], words, bos)
            union = mix.vocab.words()
            lacks = np.array([[u == 0 or w not in c for u, w in enumerate(union)] for c in [kn, nn]])
            pen = np.where(lacks, -np.log10(lacks.sum(axis=1))[:, None], 0.0)
            ref = _reference(mode, [0.4, 0.6], comp, bos_id, pen)
            got = mix.log10_distribution(_after(mix, words, bos)).astype(np.float64)
            keep = np.arange(len(union)) != bos_id
            np.testing.assert_allclose(got[keep], ref[keep], atol=3e-5)
            total = _total(got, mix)
            if mode == "linear":
                # the softmax's mass on <s> and <null> (never predicted) is the only loss
                d = 10.0 ** nn.log10_distribution(_after(nn, words, bos)).astype(np.float64)
                lost = d[nn.vocab.words().index("<s>")] + d[nn.vocab.words().index("<null>")]
                assert total + 0.6 * lost == pytest.approx(1.0, abs=1e-4)
            else:
                assert total == pytest.approx(1.0, abs=1e-5)
    # Z(h) and tuning take the neural distribution from one matrix product: the same
    # numbers as one score_word call per word
    fast = nplm.interpolate([kn, nn], [0.7, 0.5], "loglinear")
    slow = nplm.interpolate([kn, nn], [0.7, 0.5], "loglinear", fast_distributions=False)
    for words, bos in contexts:
        np.testing.assert_allclose(fast.log10_distribution(_after(fast, words, bos)),
                                   slow.log10_distribution(_after(slow, words, bos)), atol=1e-5)
    ctx = np.zeros((3, 16), dtype=np.uint32)
    ctx[1, :3] = [2, fast.vocab.id("w4"), fast.vocab.id("w7")]
    ctx[2, :2] = [1, fast.vocab.id("<s>")]
    fa = np.empty((3, 2, len(fast.vocab)), np.float32)
    sl = np.empty_like(fa)
    fast.core.distributions(ctx, fa)
    slow.core.distributions(ctx, sl)
    np.testing.assert_allclose(fa, sl, atol=1e-5)
    # threads share the neural provider safely
    lines = [" ".join(f"w{(7 * i + j) % 30}" for j in range(i % 7 + 1)) for i in range(150)]
    np.testing.assert_allclose(fast.score_sentences(lines, threads=2), slow.score_sentences(lines),
                               atol=1e-4)
    with pytest.raises(ValueError, match="not normalised"):
        nplm.interpolate([kn, raw], [0.5, 0.5])
    mix = nplm.interpolate([kn, raw], [0.5, 0.5], "loglinear")
    assert _total(mix.log10_distribution(_after(mix, ["w1"])), mix) == pytest.approx(1.0, abs=1e-5)


def test_a_foreign_state_is_read_safely(models):
    mix = nplm.interpolate([models["ptb5k.o3"], models["wiki3k.o5"]], [0.5, 0.5])
    big = nplm.interpolate([models["wiki3k.o5"], models["ptb5k.o3"]], [0.5, 0.5])
    st = _after(big, ["a", "b", "c", "d", "e", "f", "g"])      # ids from another vocabulary
    out = nplm.State()
    for w in ["the", "zzqx", "</s>"]:
        p = mix.BaseScore(st, w, out)
        assert np.isfinite(p) and p <= 0 and out.length <= mix.order - 1
