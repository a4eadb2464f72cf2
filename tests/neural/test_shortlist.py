"""Shortlist output layers: the map from words to units against a brute-force reading
of its definition, exact distributions over the whole vocabulary for every output
kind and query path, the out-of-shortlist split, saved files, training and the
command line."""
import math
from collections import Counter

import numpy as np
import pytest

import nplm
from nplm.cli.main import main
from nplm.errors import FormatError
from nplm.io import container
from nplm.neural import query as neural_query
from nplm.neural.isi import from_neural
from nplm.neural.network import PARAM_NAMES, NeuralConfig, NeuralNet
from nplm.neural.query import precompute
from nplm.neural.sample import sample_sentences
from nplm.neural.shortlist import Shortlist
from nplm.neural.train import Corpus, TrainConfig, train
from nplm.neural.vocab import BOS, NULL, SPECIALS, Vocabulary

from helpers import SHARED, numpy_log_dist, run_cli, tiny_net

needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (PTB data) is absent")
PTB5K = SHARED / "reference" / "ptb5k.txt"
LN10 = math.log(10.0)
OUTPUTS = [("softmax", "mle"), ("softmax", "nce"), ("class", "mle"), ("class", "nce"), ("tree", "mle")]


def brute_force_split(vocab, size):
    """(OOS words, {word: ln(c(w) / c(OOS set))}) straight from the definition: the
    shortlist is the ``size`` regular words of highest count (ties: lower id)."""
    regular = [w for w in range(len(vocab)) if vocab.words[w] not in SPECIALS]
    ranked = sorted(regular, key=lambda w: (-int(vocab.counts[w]), w))
    oos = sorted(ranked[size:])
    total = sum(int(vocab.counts[w]) for w in oos)
    return oos, {w: math.log(int(vocab.counts[w]) / total) for w in oos}


def brute_force_log_dist(net, ctx_words):
    """ln p(w | ctx) for every word of the vocabulary: the network's unit distribution
    (numpy forward pass) and the unigram split, from the definitions."""
    sl = net.shortlist
    units = numpy_log_dist(net, net.input_ids(np.asarray(ctx_words)))
    oos, ratio = brute_force_split(net.vocab, net.config.shortlist)
    kept = [w for w in range(len(net.vocab)) if w not in oos]
    out = np.empty(len(net.vocab))
    for u, w in enumerate(kept):            # units: the kept words in id order, then OOS
        out[w] = units[u]
    assert len(kept) == sl.n_units - 1
    for w in oos:
        out[w] = units[-1] + ratio[w]
    return out


def shortlist_net(output, objective, inputs, seed=0, V=16, size=5, **cfg):
    cfg.setdefault("hidden", (6,))
    return tiny_net(seed=seed, V=V, output=output, objective=objective, shortlist=size,
                    shortlist_input=inputs, **cfg)


# ------------------------------------------------------------------ the map

def test_units_are_the_most_frequent_words_the_specials_and_oos():
    counts = [7, 0, 50, 0, 9, 30, 30, 2, 11, 30, 1]
    vocab = Vocabulary(list(SPECIALS) + [f"w{i}" for i in range(7)], counts)
    sl = Shortlist(vocab, 3)
    # the three of count 30 (ids 5, 6, 9) beat 11 and 9
    oos, ratio = brute_force_split(vocab, 3)
    assert sl.unit_words.tolist() == [0, 1, 2, 3, 5, 6, 9, -1]
    assert sl.oos_words.tolist() == oos == [4, 7, 8, 10]
    assert sl.out_map.tolist() == [0, 1, 2, 3, 7, 4, 5, 7, 7, 6, 7]
    assert sl.in_map is None and sl.n_inputs == len(vocab)
    assert Shortlist(vocab, 3, inputs=True).in_map.tolist() == sl.out_map.tolist()
    assert sl.unit_counts.tolist() == [7, 0, 50, 0, 30, 30, 30, 9 + 2 + 11 + 1]
    for w in range(len(vocab)):
        assert sl.log_ratio[w] == pytest.approx(ratio[w] if w in oos else 0.0, rel=1e-14, abs=0)
    # <unk> and </s> are never split, whatever their counts
    low = Vocabulary(list(SPECIALS) + ["a", "b", "c"], [1, 0, 1, 0, 5, 5, 5])
    assert Shortlist(low, 1).out_map[[0, 2]].tolist() == [0, 2]


@pytest.mark.parametrize("size,msg", [(0, "positive"), (7, "whole vocabulary"), (9, "whole vocabulary"),
                                      (True, "positive")])
def test_impossible_shortlists_are_refused(size, msg):
    vocab = Vocabulary(list(SPECIALS) + [f"w{i}" for i in range(7)], np.arange(11) + 1)
    with pytest.raises(ValueError, match=msg):
        Shortlist(vocab, size)


def test_an_oos_word_without_a_count_is_refused():
    vocab = Vocabulary(list(SPECIALS) + ["a", "b", "c"], [1, 0, 1, 0, 5, 4, 0])
    with pytest.raises(ValueError, match="'c' has none"):
        Shortlist(vocab, 1)


@pytest.mark.parametrize("cfg,msg", [
    (dict(shortlist_input=True), "needs a shortlist"),
    (dict(shortlist=-1), "non-negative"),
    (dict(shortlist=5, tie_embeddings=True, output="softmax", embedding_dim=8, hidden=()), "input side")])
def test_config_refuses_nonsense(cfg, msg):
    with pytest.raises(ValueError, match=msg):
        NeuralConfig(**cfg).validate()


# ------------------------------------------------------------------ exact probabilities

@pytest.mark.parametrize("inputs", [False, True])
@pytest.mark.parametrize("output,objective", OUTPUTS)
def test_distribution_over_the_whole_vocabulary(output, objective, inputs):
    """net.log10_distribution and log_prob over every word: the brute-force split of the
    numpy forward pass, summing to one."""
    net = shortlist_net(output, objective, inputs, seed=3)
    V = len(net.vocab)
    rng = np.random.default_rng(3)
    ctx = rng.integers(0, V, (6, net.order - 1)).astype(np.int32)
    ctx[0] = [NULL, BOS]
    dist = net.log10_distribution(ctx).astype(np.float64)
    lp = net.log_prob(np.repeat(ctx, V, axis=0), np.tile(np.arange(V, dtype=np.int32), len(ctx)))
    for i, c in enumerate(ctx):
        ref = brute_force_log_dist(net, c)
        np.testing.assert_allclose(dist[i] * LN10, ref, atol=2e-5)
        np.testing.assert_allclose(lp[i * V:(i + 1) * V], ref, atol=2e-5)
        assert (10 ** dist[i]).sum() == pytest.approx(1.0, abs=1e-5)


@pytest.fixture(scope="module", params=[(o, obj, i) for o, obj in OUTPUTS for i in (False, True)],
                ids=lambda p: f"{p[0]}-{p[1]}-{'in' if p[2] else 'out'}")
def saved(request, tmp_path_factory):
    output, objective, inputs = request.param
    net = shortlist_net(output, objective, inputs, seed=5, V=24, size=8, order=4, hidden=(10,),
                        context="full" if output != "tree" else "diagonal")
    path = tmp_path_factory.mktemp("sl") / "m.nplm"
    net.save(str(path))
    return net, str(path)


def _state_after(model, words):
    s, out = nplm.State(), nplm.State()
    model.BeginSentenceWrite(s)
    for w in words:
        model.BaseScore(s, w, out)
        s, out = out, s
    return s


def _ctx(net, words):
    ids = ([BOS] + [net.vocab.id(w) for w in words])[-(net.order - 1):]
    return [NULL] * (net.order - 1 - len(ids)) + ids


def test_kenlm_api_scores_every_word(saved):
    """The model's vocabulary is every word: BaseFullScore, full_scores and the batch
    API give an out-of-shortlist word its split probability (not OOV), and the whole
    distribution after any state sums to one."""
    net, path = saved
    m = nplm.Model(path)
    words = net.vocab.words[4:]
    oos = [w for w in words if net.shortlist.out_map[net.vocab.id(w)] == net.shortlist.oos_unit]
    assert oos and len(m.vocab) == len(net.vocab)
    for history in ([], [oos[0]], [words[0], oos[-1], oos[1]]):
        s = _state_after(m, history)
        ref = brute_force_log_dist(net, _ctx(net, history)) / LN10
        dist = m.log10_distribution(s).astype(np.float64)
        np.testing.assert_allclose(dist, ref, atol=2e-5)
        assert (10 ** dist).sum() == pytest.approx(1.0, abs=1e-5)
        r = m.BaseFullScore(s, oos[2], nplm.State())
        assert r.log_prob == pytest.approx(ref[net.vocab.id(oos[2])], abs=2e-5) and not r.oov
    line = " ".join([words[0], oos[0], oos[1], words[1], "never-seen", oos[2]])
    full = list(m.full_scores(line))
    assert [o for _, _, o in full] == [False, False, False, False, True, False, False]
    assert sum(p for p, _, _ in full) == pytest.approx(m.score(line), abs=1e-4)
    # the batch path (blocks through the core) agrees with the single queries
    lines = [line, " ".join(oos), "", words[2]]
    p, lengths, o, off = m.full_scores_batch(lines)
    single = [x for li in lines for x in m.full_scores(li)]
    np.testing.assert_allclose(p, [x[0] for x in single], atol=1e-5)
    assert lengths.tolist() == [x[1] for x in single] and o.tolist() == [x[2] for x in single]
    np.testing.assert_allclose(m.score_sentences(lines), [m.score(x) for x in lines], atol=1e-4)
    # and the network's own batched scoring, as training validates
    ids = [net.vocab.id(w) for w in line.split()] + [2]
    ctx = np.array([_ctx_ids(net, ids[:i]) for i in range(len(ids))], np.int32)
    np.testing.assert_allclose(net.log10_prob(ctx, np.array(ids, np.int32)), [x[0] for x in full], atol=2e-5)


def _ctx_ids(net, ids):
    ids = ([BOS] + list(ids))[-(net.order - 1):]
    return [NULL] * (net.order - 1 - len(ids)) + ids


def test_unnormalised_scores_get_the_split_too(saved):
    net, path = saved
    m = nplm.Model(path, normalization="unnormalized")
    s = _state_after(m, [net.vocab.words[5]])
    ctx = np.array([_ctx(net, [net.vocab.words[5]])] * len(net.vocab), np.int32)
    ref = net.log10_prob(ctx, np.arange(len(net.vocab), dtype=np.int32), normalised=False)
    np.testing.assert_allclose(m.log10_distribution(s), ref, atol=2e-5)
    oos = net.shortlist.oos_words
    unit = ref[oos] - net.shortlist.log_ratio[oos] / LN10      # one score for the OOS unit
    assert np.ptp(unit) < 1e-5


def test_save_and_load_are_bit_identical(saved, tmp_path):
    net, path = saved
    back = NeuralNet.load(path)
    assert back.config == net.config and back.vocab.words == net.vocab.words
    for name in net.params:
        np.testing.assert_array_equal(back.params[name], net.params[name])
        assert back.params[name].dtype == net.params[name].dtype
    for name in ("out_map", "log_ratio", "unit_words", "unit_counts", "oos_words"):
        np.testing.assert_array_equal(getattr(back.shortlist, name), getattr(net.shortlist, name))
    again = tmp_path / "again.nplm"
    back.save(str(again))
    assert again.read_bytes() == open(path, "rb").read()
    assert container.read(path).config["format"] == 2


def test_files_without_a_shortlist_keep_format_one(tmp_path):
    """A network without a shortlist is written as before (format 1) and loads; a format
    1 file that claims a shortlist is refused."""
    net = tiny_net(seed=2)
    path = tmp_path / "plain.nplm"
    net.save(str(path))
    c = container.read(str(path))
    assert c.config["format"] == 1 and "shortlist" in c.config["net"]
    old = dict(c.config)
    old["net"] = {k: v for k, v in c.config["net"].items() if not k.startswith("shortlist")}
    container.write(str(tmp_path / "old.nplm"), "neural", old, dict(c.arrays))
    back = NeuralNet.load(str(tmp_path / "old.nplm"))
    assert back.shortlist is None and back.config.shortlist == 0
    sl = shortlist_net("softmax", "mle", False, seed=2)
    sl.save(str(tmp_path / "sl.nplm"))
    c = container.read(str(tmp_path / "sl.nplm"))
    bad = dict(c.config, format=1)
    container.write(str(tmp_path / "bad.nplm"), "neural", bad, dict(c.arrays))
    with pytest.raises(FormatError, match="format 1"):
        NeuralNet.load(str(tmp_path / "bad.nplm"))


def test_precomputed_fallback_normalisers(tmp_path):
    """Fallback tables of a shortlist softmax: keyed by the network's input rows, so a
    stored context scores exactly as the exact mode does."""
    for inputs in (False, True):
        net = shortlist_net("softmax", "nce", inputs, seed=4, V=20, size=6, order=3)
        path = str(tmp_path / f"fb{inputs}.nplm")
        net.save(path)
        words = net.vocab.words[4:]
        text = tmp_path / "train.txt"
        lines = [" ".join(words[i:i + 5]) for i in range(0, len(words), 2)]
        text.write_text("\n".join(lines) + "\n")
        sizes = precompute(path, str(text), min_count=1, progress=False)
        assert sizes[1] == net.n_inputs - 1        # one per embedding row but <null>
        fb, exact = nplm.Model(path, normalization="fallback"), nplm.Model(path)
        for line in lines:
            a, b = list(fb.full_scores(line)), list(exact.full_scores(line))
            np.testing.assert_allclose([x[0] for x in a], [x[0] for x in b], atol=2e-5)
            assert [x[1] for x in a] == [x[1] for x in b]
        p, _, _, _ = fb.full_scores_batch(lines)
        np.testing.assert_allclose(p, [x[0] for li in lines for x in fb.full_scores(li)], atol=1e-5)


def test_quantised_copy_keeps_the_shortlist(saved, tmp_path):
    from nplm.neural.quantized_files import quantize_file
    net, path = saved
    out = str(tmp_path / "q.nplm")
    quantize_file(path, out, "float16")
    q = nplm.Model(out)
    s = _state_after(q, [net.vocab.words[6]])
    assert (10 ** q.log10_distribution(s).astype(np.float64)).sum() == pytest.approx(1.0, abs=1e-4)
    assert NeuralNet.load(out).shortlist is not None


def test_isi_format_refuses_a_shortlist():
    net = shortlist_net("softmax", "mle", False, context="full", hidden=(6,))
    with pytest.raises(ValueError, match="shortlist"):
        from_neural(net)


@pytest.mark.parametrize("context", ["full", "diagonal"])
def test_an_update_moves_the_rows_of_the_batch_only(context):
    """The engine updates embedding rows beyond the output units (an input side over
    every word) and no others than the batch's."""
    net = shortlist_net("class", "mle", False, seed=9, V=30, size=5, context=context)
    assert net.n_inputs == 30 > net.n_units == 10
    params = [np.array(net.params[n]) for n in PARAM_NAMES]
    eng = net.engine(4, params=params)[0]
    ctx = np.array([[25, 29], [29, 4], [12, 25], [3, 1]], np.int32)
    before = params[0].copy()
    eng.step(ctx, np.array([9, 2, 5, 9], np.int32), None, 0.0, 1, True, 0.25)
    eng.update(0.1, 0.0, True)
    moved = np.flatnonzero(np.any(params[0] != before, axis=1))
    assert moved.tolist() == [1, 3, 4, 12, 25, 29]


# ------------------------------------------------------------------ sampling

def test_oos_draws_follow_the_unigram_share():
    net = shortlist_net("class", "mle", True, seed=6, V=20, size=4)
    sl = net.shortlist
    rng = np.random.default_rng(0)
    n = 200_000
    words = sl.words_of(np.full(n, sl.oos_unit), rng)
    got = np.bincount(words, minlength=len(net.vocab))[sl.oos_words] / n
    share = np.exp(sl.log_ratio[sl.oos_words])
    # 5 standard errors of a binomial share
    assert np.all(np.abs(got - share) < 5 * np.sqrt(share * (1 - share) / n) + 1e-12)
    kept = sl.unit_words[:-1]
    np.testing.assert_array_equal(sl.words_of(np.arange(sl.n_units - 1), rng), kept)


@pytest.mark.parametrize("output", ["class", "softmax", "tree"])
def test_sampling_emits_out_of_shortlist_words(tmp_path, output):
    net = shortlist_net(output, "mle", output == "class", seed=7, V=20, size=4, activation="relu")
    path = str(tmp_path / "s.nplm")
    net.save(path)
    data = neural_query.load(path)
    sents = list(sample_sentences(data, 3000, seed=1, streams=32))
    drawn = Counter(w for s in sents for w in s)
    assert set(drawn) <= set(net.vocab.words[4:]) | {"<unk>"}
    assert sum(drawn[net.vocab.words[w]] for w in net.shortlist.oos_words) > 0
    assert len(drawn) > len(net.vocab) // 2


# ------------------------------------------------------------------ training

def _split(tmp_path, n_valid=500):
    lines = PTB5K.read_text().splitlines()
    (tmp_path / "train.txt").write_text("\n".join(lines[:-n_valid]) + "\n")
    (tmp_path / "valid.txt").write_text("\n".join(lines[-n_valid:]) + "\n")
    return tmp_path / "train.txt", tmp_path / "valid.txt"


@needs_shared
@pytest.mark.parametrize("output,objective,inputs", [("class", "nce", False), ("softmax", "mle", True),
                                                     ("tree", "mle", False)])
def test_training_a_shortlist_model(tmp_path, output, objective, inputs):
    """A short run on PTB text: the units are the 400 most frequent words; the saved
    model's exact perplexity over the whole vocabulary (every word scored, none OOV)
    beats the unigram's, and the query API gives the same figure."""
    tr, va = _split(tmp_path)
    cfg = NeuralConfig(order=4, embedding_dim=32, hidden=(64,), output=output, objective=objective,
                       noise_samples=20, clustering="frequency", shortlist=400, shortlist_input=inputs)
    tc = TrainConfig(epochs=2, minibatch=128, learning_rate=0.1, dropout=0.0, threads=1)
    net = train(tr, va, tmp_path / "m.nplm", cfg, tc, log=lambda s: None, progress=False)
    assert net.n_units == 405 and net.n_inputs == (405 if inputs else len(net.vocab))
    corpus = Corpus(tr, va, 4, vocab=net.vocab)
    ppl = net.perplexity(*corpus.valid)
    counts = Counter(w for li in tr.read_text().splitlines() for w in li.split() + ["</s>"])
    toks = [w if w in net.vocab.index else "<unk>" for li in va.read_text().splitlines()
            for w in li.split() + ["</s>"]]
    total = sum(counts.values())
    uni = math.exp(-sum(math.log((counts[w] + 1) / (total + len(net.vocab))) for w in toks) / len(toks))
    assert ppl < 0.8 * uni, (ppl, uni)
    m = nplm.Model(str(tmp_path / "m.nplm"))
    lines = va.read_text().splitlines()
    assert 10 ** (-sum(m.score(li) for li in lines) / len(toks)) == pytest.approx(ppl, rel=1e-4)


@needs_shared
def test_resume_keeps_the_shortlist(tmp_path):
    tr, va = _split(tmp_path, 100)
    cfg = NeuralConfig(order=3, embedding_dim=8, hidden=(10,), output="class", objective="mle",
                       clustering="frequency", classes=5, shortlist=50, shortlist_input=True)
    quiet = dict(log=lambda s: None, progress=False)
    tc = TrainConfig(epochs=2, minibatch=64, threads=1, max_halvings=10)
    train(tr, va, tmp_path / "full.nplm", cfg, tc, **quiet)
    train(tr, va, tmp_path / "part.nplm", cfg, TrainConfig(epochs=1, minibatch=64, threads=1, max_halvings=10),
          **quiet)
    with pytest.raises(ValueError, match="--shortlist: 50 in the checkpoint, 60 now"):
        train(tr, va, tmp_path / "part.nplm", NeuralConfig(**{**cfg.to_json(), "hidden": (10,), "shortlist": 60}),
              tc, resume=True, **quiet)
    train(tr, va, tmp_path / "part.nplm", None, tc, resume=True, **quiet)
    assert (tmp_path / "full.nplm").read_bytes() == (tmp_path / "part.nplm").read_bytes()


@needs_shared
def test_cli_trains_a_shortlist_model(tmp_path, capsys):
    tr, va = _split(tmp_path, 300)
    out = tmp_path / "cli.nplm"
    rc = main(["train", "--train", str(tr), "--valid", str(va), "--out", str(out), "--order", "3",
               "--embedding-dim", "16", "--epochs", "1", "--threads", "1", "--shortlist", "300",
               "--shortlist-input", "--clustering", "frequency", "--quiet"])
    assert rc == 0
    net = NeuralNet.load(str(out))
    assert net.config.shortlist == 300 and net.config.shortlist_input and net.n_units == 305
    done = run_cli("perplexity", out, va)
    assert done.returncode == 0, done.stderr
    corpus = Corpus(tr, va, 3, vocab=net.vocab)
    first = done.stdout.splitlines()[0]
    assert first.startswith("Perplexity including OOVs:")
    assert float(first.split()[-1]) == pytest.approx(net.perplexity(*corpus.valid), rel=1e-3)
    # a shortlist as large as the vocabulary, and an input shortlist without one, are refused
    for extra, msg in ((["--shortlist", "100000"], "whole vocabulary"), (["--shortlist-input"], "needs a shortlist")):
        rc = main(["train", "--train", str(tr), "--out", str(tmp_path / "x.nplm"), "--epochs", "1",
                   "--quiet", *extra])
        assert rc != 0
        assert msg in capsys.readouterr().err
