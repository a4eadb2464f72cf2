"""Finite-difference gradient checks (float64) of the training kernels: every context
kind, hidden depth, activation, output layer and objective, with and without dropout,
and with a shortlist output (fewer output units than embedding rows, or both mapped)."""
import itertools

import numpy as np
import pytest

from nplm.neural.network import PARAM_NAMES

from helpers import tiny_net


def _noise(net, rng):
    k, V = net.config.noise_samples, net.n_units
    if net.config.objective != "nce":
        return None
    if net.config.output == "softmax":
        return (rng.integers(0, V, k).astype(np.int32), rng.normal(0, 1, V), np.zeros(0, np.int32), np.zeros(0))
    C, cs = net.n_classes, net.structs["class_start"]
    rows = np.concatenate([rng.integers(cs[c], cs[c + 1], k) for c in range(C)]).astype(np.int32)
    return (rng.integers(0, C, k).astype(np.int32), rng.normal(0, 1, C), rows, rng.normal(0, 1, V))


def gradient_error(net, dropout=0.0, seed=0, B=7, probes=12, input_dropout=0.0, grouped=None):
    """Largest relative difference between the analytic gradient and central differences.
    ``grouped``: assert that the first layer did (True) or did not (False) go through the
    batch's distinct words."""
    rng = np.random.default_rng(seed)
    params = [net.params[n].astype(np.float64) for n in PARAM_NAMES]
    V, m = net.n_units, net.order - 1          # (a shortlist's units; the words without one)
    ctx = rng.integers(0, net.n_inputs, (B, m)).astype(np.int32)
    if net.config.tie_embeddings:
        # as the trainer runs it: one table in output-row order, contexts through word_pos
        params[PARAM_NAMES.index("emb")] = params[PARAM_NAMES.index("out_w")]
        ctx = net.structs["word_pos"][ctx].astype(np.int32)
    eng, grads, _ = net.engine(B, nthreads=1, dtype=np.float64, params=params)
    tgt = rng.integers(0, V, B).astype(np.int32)
    noise = _noise(net, rng)
    eng.step(ctx, tgt, noise, dropout, 99, True, 0.5, input_dropout)
    if grouped is not None:
        assert eng.grouped == grouped
    worst = 0.0
    checked = 0
    for p, g, _name in zip(params, grads, PARAM_NAMES):
        flat, gflat = p.reshape(-1), g.reshape(-1)
        for j in rng.choice(flat.size, min(flat.size, probes), replace=False) if flat.size else []:
            old, h = flat[j], 1e-6
            flat[j] = old + h
            up = eng.step(ctx, tgt, noise, dropout, 99, False, 0.5, input_dropout)
            flat[j] = old - h
            down = eng.step(ctx, tgt, noise, dropout, 99, False, 0.5, input_dropout)
            flat[j] = old
            num = 0.5 * (up - down) / (2 * h)
            worst = max(worst, abs(num - gflat[j]) / max(1e-3, abs(num) + abs(gflat[j])))
            checked += 1
    assert checked > 20
    return worst


OUTPUTS = [("softmax", "mle"), ("softmax", "nce"), ("class", "mle"), ("class", "nce"), ("tree", "mle")]


@pytest.mark.parametrize("context,hidden,output", [
    (c, h, o) for c, h, o in itertools.product(["full", "diagonal"], [(), (6,), (6, 5)], OUTPUTS)])
def test_gradients(context, hidden, output):
    net = tiny_net(context=context, hidden=hidden, output=output[0], objective=output[1])
    assert gradient_error(net) < 1e-5


@pytest.mark.parametrize("hidden,output", list(itertools.product([(), (6, 5)], OUTPUTS)))
def test_gradients_grouped_first_layer(hidden, output):
    """Full contexts over a batch with repeated words take the distinct-word path."""
    net = tiny_net(seed=11, context="full", hidden=hidden, output=output[0], objective=output[1])
    assert gradient_error(net, seed=11, B=40, grouped=True) < 1e-5
    # input dropout gives every example its own input, so the per-example path runs
    assert gradient_error(net, seed=12, B=40, input_dropout=0.2, grouped=False) < 1e-5


@pytest.mark.parametrize("output", OUTPUTS)
def test_grouped_batch_equals_sum_of_examples(output):
    """One grouped step over 60 examples gives the loss and gradients of 60 one-example
    steps (which cannot group), up to rounding."""
    net = tiny_net(seed=13, context="full", hidden=(6,), output=output[0], objective=output[1])
    rng = np.random.default_rng(13)
    B = 60
    ctx = rng.integers(0, 12, (B, 2)).astype(np.int32)
    tgt = rng.integers(0, 12, B).astype(np.int32)
    noise = _noise(net, rng)
    params = [net.params[n].astype(np.float64) for n in PARAM_NAMES]
    eng, grads, _ = net.engine(B, dtype=np.float64, params=params)
    loss = eng.step(ctx, tgt, noise, 0.0, 1, True, 1.0)
    assert eng.grouped
    one, g1, _ = net.engine(1, dtype=np.float64, params=params)
    loss1 = sum(one.step(ctx[b:b + 1], tgt[b:b + 1], noise, 0.0, 1, True, 1.0) for b in range(B))
    assert not one.grouped
    assert abs(loss - loss1) < 1e-9 * abs(loss)
    for a, b, name in zip(grads, g1, PARAM_NAMES):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("activation", ["relu", "tanh", "identity"])
@pytest.mark.parametrize("output", OUTPUTS)
def test_gradients_activation_and_dropout(activation, output):
    net = tiny_net(seed=3, activation=activation, output=output[0], objective=output[1])
    assert gradient_error(net, seed=3) < 1e-5
    assert gradient_error(net, dropout=0.4, seed=4) < 1e-5
    assert gradient_error(net, dropout=0.3, input_dropout=0.3, seed=5) < 1e-5


@pytest.mark.parametrize("context", ["full", "diagonal"])
def test_gradients_input_dropout(context):
    net = tiny_net(seed=6, context=context, hidden=(6,), output="class", objective="mle")
    assert gradient_error(net, input_dropout=0.5, seed=6) < 1e-5


@pytest.mark.parametrize("output", OUTPUTS[:4])
def test_gradients_tied_embeddings(output):
    net = tiny_net(seed=8, embedding_dim=5, hidden=(6, 5), output=output[0], objective=output[1],
                   tie_embeddings=True)
    assert gradient_error(net, seed=8) < 1e-5
    assert gradient_error(net, dropout=0.3, input_dropout=0.2, seed=9) < 1e-5


def test_gradient_check_detects_errors():
    """The check itself can fail: a perturbed gradient is caught."""
    net = tiny_net(output="softmax", objective="mle")
    rng = np.random.default_rng(0)
    params = [net.params[n].astype(np.float64) for n in PARAM_NAMES]
    eng, grads, _ = net.engine(4, dtype=np.float64, params=params)
    ctx = rng.integers(0, 12, (4, 2)).astype(np.int32)
    tgt = rng.integers(0, 12, 4).astype(np.int32)
    eng.step(ctx, tgt, None, 0.0, 1, True, 1.0)
    j = 5
    flat = params[PARAM_NAMES.index("w1")].reshape(-1)
    g = grads[PARAM_NAMES.index("w1")].reshape(-1)[j]
    old = flat[j]
    flat[j] = old + 1e-6
    up = eng.step(ctx, tgt, None, 0.0, 1, False, 1.0)
    flat[j] = old - 1e-6
    down = eng.step(ctx, tgt, None, 0.0, 1, False, 1.0)
    num = (up - down) / 2e-6
    assert abs(num - g) < 1e-6 * max(1, abs(g))
    assert abs(num - (g + 1e-3)) > 1e-6 * max(1, abs(g))


@pytest.mark.parametrize("output", OUTPUTS)
def test_threads_do_not_change_results(output):
    """Per-example loops run on OpenMP threads; shared writes are serial, so the gradients
    are the same with one or two threads."""
    net = tiny_net(seed=5, output=output[0], objective=output[1], context="diagonal")
    rng = np.random.default_rng(5)
    ctx = rng.integers(0, 12, (9, 2)).astype(np.int32)
    tgt = rng.integers(0, 12, 9).astype(np.int32)
    noise = _noise(net, rng)
    _same_with_threads(net, ctx, tgt, noise, 0.3, 0.2)


@pytest.mark.parametrize("output", OUTPUTS)
def test_threads_do_not_change_grouped_results(output):
    """The grouped first layer's scatter-add is split by columns, so also thread-exact."""
    net = tiny_net(seed=15, output=output[0], objective=output[1], context="full")
    rng = np.random.default_rng(15)
    ctx = rng.integers(0, 12, (50, 2)).astype(np.int32)
    tgt = rng.integers(0, 12, 50).astype(np.int32)
    assert _same_with_threads(net, ctx, tgt, _noise(net, rng), 0.3, 0.0)


def _same_with_threads(net, ctx, tgt, noise, dropout, input_dropout):
    results = []
    for threads in (1, 2):
        params = [net.params[n].astype(np.float64) for n in PARAM_NAMES]
        eng, grads, _ = net.engine(len(tgt), nthreads=threads, dtype=np.float64, params=params)
        loss = eng.step(ctx, tgt, noise, dropout, 7, True, 1.0, input_dropout)
        results.append((loss, [g.copy() for g in grads]))
    assert results[0][0] == results[1][0]
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_array_equal(a, b)
    return eng.grouped


@pytest.mark.parametrize("inputs", [False, True])
@pytest.mark.parametrize("context", ["full", "diagonal"])
@pytest.mark.parametrize("output", OUTPUTS)
def test_gradients_with_a_shortlist(output, context, inputs):
    """A shortlist net's engine: output layers over the units (shortlist, specials, OOS),
    the embedding table over every word or over the same units."""
    net = tiny_net(seed=21, V=14, context=context, hidden=(6,), output=output[0], objective=output[1],
                   shortlist=5, shortlist_input=inputs)
    assert net.n_units == 10 and net.n_inputs == (10 if inputs else 14)
    assert gradient_error(net, seed=21) < 1e-5
    assert gradient_error(net, seed=22, dropout=0.3, input_dropout=0.2) < 1e-5
    # the grouped first layer (full contexts, many repeats) over the embedding rows
    if context == "full":
        assert gradient_error(net, seed=23, B=40, grouped=True) < 1e-5


@pytest.mark.parametrize("output", OUTPUTS[:4])
def test_gradients_tied_embeddings_with_a_shortlist(output):
    net = tiny_net(seed=24, V=14, embedding_dim=5, hidden=(6, 5), output=output[0], objective=output[1],
                   tie_embeddings=True, shortlist=5, shortlist_input=True)
    assert gradient_error(net, seed=24) < 1e-5
