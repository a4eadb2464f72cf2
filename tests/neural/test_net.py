"""Exact scoring of the neural network against a float64 reference; normalisation of
softmax, class- and tree-factored outputs; save/load; alias sampling."""
import itertools

import numpy as np
import pytest

from nplm.errors import FormatError
from nplm.neural import _noise
from nplm.neural.network import PARAM_NAMES, NeuralConfig, NeuralNet, class_layout

from helpers import reference_log_distribution, tiny_net

KINDS = list(itertools.product(["full", "diagonal"], [(), (6,), (7, 5)], ["softmax", "class", "tree"]))


@pytest.mark.parametrize("context,hidden,output", KINDS)
def test_distribution_matches_reference_and_sums_to_one(context, hidden, output):
    net = tiny_net(context=context, hidden=hidden, output=output, activation="tanh")
    rng = np.random.default_rng(1)
    ctx = rng.integers(0, len(net.vocab), (9, net.order - 1))
    got = net.log10_distribution(ctx).astype(np.float64)
    ref = reference_log_distribution(net, ctx) / np.log(10)
    np.testing.assert_allclose(got, ref, atol=2e-5)
    np.testing.assert_allclose((10.0 ** got).sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("output", ["softmax", "class", "tree"])
def test_log10_prob_matches_distribution(output):
    net = tiny_net(output=output, V=40, n_classes=6)
    rng = np.random.default_rng(2)
    ctx = rng.integers(0, 40, (50, 2))
    words = rng.integers(0, 40, 50)
    dist = net.log10_distribution(ctx)
    np.testing.assert_allclose(net.log10_prob(ctx, words), dist[np.arange(50), words], atol=2e-6)


def test_unnormalised_scores():
    """NCE models can be read unnormalised: softmax gives the raw score s, class gives
    psi(c) + phi(w); both differ from the exact value by the log-normaliser only."""
    for output in ("softmax", "class"):
        net = tiny_net(output=output, objective="nce")
        ctx = np.array([[1, 5], [3, 3], [7, 4]])
        w = np.array([4, 8, 2])
        raw = net.log_prob(ctx, w, normalised=False)
        exact = net.log_prob(ctx, w)
        P = {n: net.params[n].astype(np.float64) for n in PARAM_NAMES}
        # recover h through the reference's softmax-free path: difference is the normaliser,
        # which must be the same for two words of one context in the softmax case
        if output == "softmax":
            raw2 = net.log_prob(ctx, np.array([5, 9, 10]), normalised=False)
            exact2 = net.log_prob(ctx, np.array([5, 9, 10]))
            np.testing.assert_allclose(raw - exact, raw2 - exact2, rtol=1e-5)
        assert not np.allclose(raw, exact)
        del P


def test_save_load_bit_identical(tmp_path):
    net = tiny_net(output="class", hidden=(6,))
    path = tmp_path / "m.nplm"
    net.save(path)
    back = NeuralNet.load(path)
    assert back.config == net.config
    assert back.vocab.words == net.vocab.words
    np.testing.assert_array_equal(back.vocab.counts, net.vocab.counts)
    for n in PARAM_NAMES:
        assert back.params[n].dtype == np.float32
        assert back.params[n].tobytes() == net.params[n].tobytes()
        assert not back.params[n].flags.writeable  # a view into the mapped file
    for k, v in net.structs.items():
        np.testing.assert_array_equal(back.structs[k], v)
    ctx = np.array([[1, 2], [5, 6]])
    np.testing.assert_array_equal(back.log10_prob(ctx, [4, 7]), net.log10_prob(ctx, [4, 7]))
    back.save(tmp_path / "again.nplm")
    assert (tmp_path / "again.nplm").read_bytes() == path.read_bytes()


def test_load_rejects_bad_files(tmp_path):
    bad = tmp_path / "x.nplm"
    bad.write_bytes(b"not a model at all")
    with pytest.raises(FormatError, match="x.nplm"):
        NeuralNet.load(bad)
    net = tiny_net()
    good = tmp_path / "g.nplm"
    net.save(good)
    data = bytearray(good.read_bytes())
    (tmp_path / "t.nplm").write_bytes(bytes(data[:-100]))
    with pytest.raises(FormatError, match="t.nplm"):
        NeuralNet.load(tmp_path / "t.nplm")
    # a config that contradicts the arrays
    from nplm.io import container
    c = container.read(good)
    cfg = dict(c.config)
    cfg["net"] = dict(cfg["net"], embedding_dim=5)
    container.write(tmp_path / "c.nplm", "neural", cfg, {k: np.array(v) for k, v in c.arrays.items()})
    with pytest.raises(FormatError, match="c.nplm.*emb"):
        NeuralNet.load(tmp_path / "c.nplm")


def test_scoring_rejects_bad_ids():
    net = tiny_net()
    with pytest.raises(ValueError, match="shape"):
        net.log10_prob(np.zeros((2, 3), int), [1, 2])
    with pytest.raises(ValueError, match="outside"):
        net.log10_prob(np.zeros((2, 2), int), [1, 99])
    with pytest.raises(ValueError, match="outside"):
        net.log10_distribution(np.full((1, 2), -1))


@pytest.mark.parametrize("bad,msg", [
    (dict(order=1), "order"), (dict(embedding_dim=-3), "embedding"), (dict(hidden=(5, -1)), "hidden"),
    (dict(hidden=(4, 4, 4)), "two hidden"), (dict(objective="nce", noise_samples=0), "noise sample"),
    (dict(output="tree", objective="nce"), "tree"), (dict(context="banded"), "context"),
    (dict(classes=-2), "classes")])
def test_config_validation(bad, msg):
    with pytest.raises(ValueError, match=msg):
        NeuralConfig(**bad).validate()


def test_class_layout():
    wc = np.array([2, 0, 1, 0, 2, 2])
    start, words, pos = class_layout(wc, 3)
    assert start.tolist() == [0, 2, 3, 6]
    assert words.tolist() == [1, 3, 2, 0, 4, 5]
    assert all(words[pos[w]] == w for w in range(6))
    with pytest.raises(ValueError, match="no words"):
        class_layout(np.array([0, 0, 2]), 3)


def test_alias_sampling_matches_distribution():
    w = np.array([5.0, 0.0, 1.0, 10.0, 0.01, 3.0])
    prob, alias = _noise.build_alias(w)
    out = np.zeros(200_000, np.int32)
    _noise.sample_alias(prob, alias, 0, out, np.array([42], np.uint64))
    freq = np.bincount(out, minlength=w.size) / out.size
    expect = w / w.sum()
    # 5 standard errors of a binomial proportion
    assert np.all(np.abs(freq - expect) <= 5 * np.sqrt(expect * (1 - expect) / out.size) + 1e-12)
    assert freq[1] == 0
    with pytest.raises(ValueError):
        _noise.build_alias(np.zeros(3))


def test_class_sampling_stays_in_class():
    start = np.array([0, 2, 5, 6], np.int32)
    weights = np.array([1.0, 3.0, 1.0, 1.0, 2.0, 7.0])
    prob = np.empty(6)
    alias = np.empty(6, np.int32)
    for c in range(3):
        p, a = _noise.build_alias(weights[start[c]:start[c + 1]].copy())
        prob[start[c]:start[c + 1]], alias[start[c]:start[c + 1]] = p, a
    k = 20000
    out = np.zeros(3 * k, np.int32)
    _noise.sample_classes(prob, alias, start, k, out, np.array([7], np.uint64))
    for c in range(3):
        got = out[c * k:(c + 1) * k]
        assert got.min() >= start[c] and got.max() < start[c + 1]
        freq = np.bincount(got - start[c], minlength=start[c + 1] - start[c]) / k
        expect = weights[start[c]:start[c + 1]] / weights[start[c]:start[c + 1]].sum()
        assert np.all(np.abs(freq - expect) < 0.02)


@pytest.mark.parametrize("output", ["softmax", "class"])
def test_extreme_logits(output):
    """Scores hundreds of nats apart: the float exp must underflow to 0, not wrap."""
    net = tiny_net(output=output, V=60, n_classes=5, seed=9)
    net.params["out_w"] *= 60
    net.params["out_b"] *= 60
    rng = np.random.default_rng(9)
    ctx = rng.integers(0, 60, (20, 2))
    got = 10.0 ** net.log10_distribution(ctx).astype(np.float64)
    ref = np.exp(reference_log_distribution(net, ctx))
    assert np.ptp(reference_log_distribution(net, ctx), axis=1).min() > 100
    # float32 logits of a few hundred carry ~1e-5 absolute error of their own
    np.testing.assert_allclose(got, ref, atol=1e-5)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("output", ["softmax", "class", "tree"])
def test_scoring_allocates_no_gradient_copies(output):
    """Scoring engines alias the parameters in the gradient and optimiser slots: a
    training run's validation held two more copies of the model per thread."""
    import tracemalloc
    net = tiny_net(V=6000, n_classes=60, output=output, embedding_dim=32, hidden=(32,))
    size = sum(p.nbytes for p in net.params.values())
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, 6000, (64, 2)).astype(np.int32)
    tracemalloc.start()
    try:
        lp = net.log_prob(ctx, rng.integers(0, 6000, 64), batch=16, threads=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.isfinite(lp).all()
    assert peak < 0.5 * size, (peak, size)


@pytest.mark.parametrize("output", ["class", "tree"])
def test_per_word_scores_of_factored_nets_need_no_vocabulary_wide_scratch(output):
    """Validation's blocks of 1024 rows kept V floats a row of score scratch even where
    only the classes (or a tree path) are scored: 135 MB a thread at V = 33k."""
    import tracemalloc
    V = 20000
    net = tiny_net(V=V, n_classes=100, output=output, embedding_dim=8, hidden=(8,))
    rng = np.random.default_rng(1)
    ctx, words = rng.integers(0, V, (1024, 2)).astype(np.int32), rng.integers(0, V, 1024)
    expect = reference_log_distribution(net, ctx[:8])[np.arange(8), words[:8]]
    tracemalloc.start()
    try:
        lp = net.log_prob(ctx, words, threads=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(lp[:8], expect, rtol=1e-4, atol=1e-4)
    assert peak < 1024 * V * 4 / 4, peak            # a V-wide block would be 80 MB
    np.testing.assert_allclose(net.log10_distribution(ctx[:8])[np.arange(8), words[:8]] * np.log(10),
                               expect, rtol=1e-4, atol=1e-4)     # distributions still work


def test_a_mapped_net_copies_its_weights_once_for_every_kind_of_scoring(tmp_path):
    """Scoring engines need writeable arrays, so a memory-mapped net copies its
    weights for them: once, shared by per-word and whole-distribution engines."""
    import tracemalloc
    tiny_net(V=6000, n_classes=60, output="class", embedding_dim=32, hidden=(32,)).save(tmp_path / "m.nplm")
    net = NeuralNet.load(tmp_path / "m.nplm")
    size = sum(p.nbytes for p in net.params.values())
    ctx = np.random.default_rng(0).integers(0, 6000, (4, 2)).astype(np.int32)
    net.log_prob(ctx, ctx[:, 1], batch=4, threads=1)
    tracemalloc.start()
    try:
        d = net.log10_distribution(ctx, batch=4)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.isfinite(d).all()
    assert peak < 0.5 * size, (peak, size)
