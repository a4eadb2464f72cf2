"""The Cython trainer (one thread) and the torch engine are one training algorithm:
from the same weights, examples and noise samples they take the same steps, and whole
runs with the same examples in the same order and the same noise end at the same
validation perplexity, epoch by epoch, learning-rate halvings included.

The torch engine draws its examples from its own shuffled stream and seeds its noise
per step (so that a resume within an epoch and several processes see the same
samples); here it is handed the Cython trainer's order and noise stream instead, so
that any difference left is one of the algorithm: initialisation, losses, gradient
scale, update rule, sparse row updates, weight decay, averaging, validation, halving
and stopping.  Dropout is off: the engines draw their masks from different
generators.  Cython's Hogwild threads (--threads > 1) are another, asynchronous
algorithm and are not compared here."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch engine needs PyTorch (pip install 'nplm[torch]')")

from nplm.neural import torch_engine as te  # noqa: E402
from nplm.neural import torch_net as tn  # noqa: E402
from nplm.neural.network import PARAM_NAMES, NeuralConfig, NeuralNet  # noqa: E402
from nplm.neural.train import Corpus, Noise, TrainConfig, Trainer, epoch_noise_state, epoch_rng, output_structures  # noqa: E402

from helpers import markov_text  # noqa: E402


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    d = tmp_path_factory.mktemp("parity")
    return markov_text(d / "train.txt", 300, 1, chain_seed=7), markov_text(d / "valid.txt", 60, 2, chain_seed=7)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


KINDS = {
    "softmax-nce-full-2": NeuralConfig(order=4, embedding_dim=8, hidden=(12, 10), context="full", output="softmax",
                                       objective="nce", noise_samples=5, variable_history=False),
    "class-nce-diagonal": NeuralConfig(order=3, embedding_dim=8, output="class", classes=5, clustering="brown",
                                       variable_history=False),
    "class-mle-tanh": NeuralConfig(order=3, embedding_dim=8, hidden=(8,), output="class", classes=4,
                                   objective="mle", activation="tanh", clustering="frequency",
                                   variable_history=False),
    "tree-mle": NeuralConfig(order=3, embedding_dim=8, hidden=(8,), context="full", output="tree",
                             variable_history=False),
    "softmax-mle-shortlist": NeuralConfig(order=3, embedding_dim=8, output="softmax", objective="mle",
                                          shortlist=20, shortlist_input=True, variable_history=False),
}


def _setup(texts, cfg, seed):
    corpus = Corpus(texts[0], texts[1], cfg.order)
    wc, tree = output_structures(cfg, corpus.vocab, corpus.train[1], seed, lambda s: None)
    return corpus, (lambda: NeuralNet.create(cfg, corpus.vocab, word_class=wc, tree=tree, seed=seed))


# ------------------------------------------------------------------ single steps

@pytest.mark.parametrize("kind,optimizer,l2", [("softmax-nce-full-2", "adagrad", 0.0),
                                               ("softmax-nce-full-2", "sgd", 1e-3),
                                               ("class-nce-diagonal", "adagrad", 1e-3),
                                               ("class-mle-tanh", "adagrad", 0.0),
                                               ("tree-mle", "sgd", 0.0),
                                               ("softmax-mle-shortlist", "adagrad", 1e-3)])
def test_steps_from_the_same_weights_batch_and_noise_are_the_same_update(texts, kind, optimizer, l2):
    cfg, B, lr = KINDS[kind], 24, 0.1
    corpus, make = _setup(texts, cfg, 1)
    tc = TrainConfig(minibatch=B, threads=1, dropout=0.0, input_dropout=0.0, optimizer=optimizer, l2=l2,
                     learning_rate=lr, average=0)
    cy = Trainer(make(), corpus, tc, log=lambda s: None, progress=False)
    S = tn.TorchNet(make())
    P = S.params()
    A = {n: torch.zeros_like(p) for n, p in P.items()}
    dense = tn.dense_names(S)
    noise = Noise(cy.net, 5) if cfg.objective == "nce" else None
    consts = tn.noise_constants(noise, "cpu") if noise else None
    ctx, tgt = corpus.train                          # word ids: the torch side maps them itself
    rows_ctx, rows_tgt = cy.train_rows               # what the Cython engine reads
    for step in range(3):
        sl = slice(step * B, (step + 1) * B)
        drawn = tuple(a.copy() for a in noise.draw()) if noise else None
        loss_c = cy.engine.step(np.ascontiguousarray(rows_ctx[sl]), np.ascontiguousarray(rows_tgt[sl]), drawn,
                                0.0, 0, True, 1.0 / B, 0.0)
        cy.engine.update(lr, l2, optimizer == "adagrad")
        c = torch.from_numpy(np.asarray(S.net.input_ids(ctx[sl]), np.int64))
        t = torch.from_numpy(np.asarray(S.net.unit_ids(tgt[sl]), np.int64))
        loss, rows, leaves = tn.step_loss(P, S, c, t, tn.NoiseDraw(drawn, consts) if noise else None, 0.0, 0.0,
                                          dense)
        (loss / B).backward()
        for n, q in leaves.items():
            tn.update_dense(P, A, n, q.grad if q.grad is not None else torch.zeros_like(q), lr, l2,
                            optimizer == "adagrad")
        for name, R in rows:
            g = R.w.grad if R.b is None else torch.cat([R.w.grad, R.b.grad[:, None]], 1)
            if name == "emb":
                tn.update_rows(P, A, "emb", R.ids, g, lr, l2, optimizer == "adagrad")
            else:
                tn.update_rows(P, A, "out_w", R.ids, g[:, :-1], lr, l2, optimizer == "adagrad")
                tn.update_rows(P, A, "out_b", R.ids, g[:, -1], lr, l2, optimizer == "adagrad")
        assert float(loss.detach()) == pytest.approx(loss_c, rel=1e-5)
        for i, n in enumerate(PARAM_NAMES):
            np.testing.assert_allclose(P[n].numpy(), cy.params[i], rtol=0, atol=1e-5, err_msg=n)
            np.testing.assert_allclose(A[n].numpy(), cy.accum[i], rtol=1e-4, atol=1e-7, err_msg=n)


# ------------------------------------------------------------------ whole runs

class _CythonOrder:
    """The training examples of each epoch in the Cython trainer's order, as the torch
    engine's stream hands out batches."""

    def __init__(self, ctx, tgt, seed):
        self.ctx, self.tgt, self.seed = ctx, tgt, seed

    def batches(self, epoch, size, skip=0):
        perm = epoch_rng(self.seed, epoch).permutation(self.tgt.size)
        ctx, tgt = self.ctx[perm], self.tgt[perm]
        for lo in range(skip * size, tgt.size, size):
            yield np.ascontiguousarray(ctx[lo:lo + size]), np.ascontiguousarray(tgt[lo:lo + size])


class _EpochNoise:
    """A Noise whose per-step seeding is ignored: it draws one stream an epoch, from
    the state the Cython trainer's (only) engine starts the epoch with."""

    def __init__(self, noise):
        self.noise = noise
        self.state = np.zeros(1, np.uint64)     # what the engine seeds each step: unused

    def draw(self):
        return self.noise.draw()


class _InCythonsSteps(te.TorchTrainer):
    """The torch engine's trainer drawing the Cython trainer's noise stream."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        if self.noise is not None:
            self.noise = _EpochNoise(self.noise)

    def _prepare(self, ctx, tgt, step):
        if self.noise is not None and step == 0:
            self.noise.noise.state[0] = epoch_noise_state(self.tc.seed, self.epoch, 0)
        return super()._prepare(ctx, tgt, step)


def _both(texts, cfg, **settings):
    # (averaging over an epoch: on this small text the default 0.25 would average
    # nothing, each average step taking the weights as they are)
    tc = TrainConfig(**{"epochs": 3, "minibatch": 32, "threads": 1, "seed": 3, "dropout": 0.0,
                        "input_dropout": 0.0, "average": 1.0, "learning_rate": 0.1, **settings})
    corpus, make = _setup(texts, cfg, tc.seed)
    cy = Trainer(make(), corpus, tc, log=lambda s: None, progress=False)
    cnet = cy.train()
    th = _InCythonsSteps(make(), _CythonOrder(*corpus.train, tc.seed), corpus.valid, tc,
                         te.TorchOptions(checkpoint_minutes=0), te.Dist("cpu"), [int(corpus.train[1].size)],
                         log=lambda s: None, progress=False)
    tnet = th.S.to_net(th.train())
    return corpus, (cy.history, cnet), (th.history, tnet)


@pytest.mark.parametrize("kind", ["softmax-nce-full-2", "class-nce-diagonal", "tree-mle"])
def test_whole_runs_in_the_same_order_with_the_same_noise_end_at_the_same_perplexity(texts, kind):
    corpus, (ch, cnet), (th, tnet) = _both(texts, KINDS[kind])
    assert [h["epoch"] for h in ch] == [h["epoch"] for h in th] == [1, 2, 3]
    cv, tv = [h["valid_ppl"] for h in ch], [h["valid_ppl"] for h in th]
    assert cv[-1] < 0.9 * cv[0]           # it learns, so that the comparison means something
    np.testing.assert_allclose(tv, cv, rtol=1e-3)
    np.testing.assert_allclose([h["loss"] for h in th], [h["loss"] for h in ch], rtol=1e-3)
    assert tnet.perplexity(*corpus.valid) == pytest.approx(cnet.perplexity(*corpus.valid), rel=1e-3)


def test_learning_rate_halving_and_early_stopping_are_the_same(texts):
    # a step size too large for the net: validation gets worse, both go back to the best
    # epoch, halve the rate and stop after one halving
    corpus, (ch, cnet), (th, tnet) = _both(texts, KINDS["softmax-nce-full-2"], epochs=8, learning_rate=2.0,
                                           optimizer="sgd", max_halvings=1, average=0)
    lrs = [h["lr"] for h in ch]
    assert lrs[-1] < lrs[0] and len(ch) < 8
    assert [h["lr"] for h in th] == lrs
    np.testing.assert_allclose([h["valid_ppl"] for h in th], [h["valid_ppl"] for h in ch], rtol=1e-3)
    p_c, p_t = cnet.perplexity(*corpus.valid), tnet.perplexity(*corpus.valid)
    assert math.isfinite(p_c) and p_t == pytest.approx(p_c, rel=1e-3)


# ------------------------------------------------------------------ dropout

def test_dropout_masks_differ_but_the_mean_loss_over_masks_is_the_same(texts):
    # the engines draw masks from different generators: compare the loss of one batch
    # averaged over many masks (inverted dropout on the hidden layer and on the input
    # embeddings, the same rates), on the default network's kind
    cfg = KINDS["class-nce-diagonal"]
    corpus, make = _setup(texts, cfg, 1)
    tc = TrainConfig(epochs=1, minibatch=64, threads=1, dropout=0.0, input_dropout=0.0, average=0)
    cy = Trainer(make(), corpus, tc, log=lambda s: None, progress=False)
    cy.train()                                        # weights away from their initial values
    S = tn.TorchNet(cy._net_view(cy.params))
    P = S.params()
    noise = Noise(cy.net, 5) if cfg.objective == "nce" else None
    drawn = tuple(a.copy() for a in noise.draw()) if noise else None
    nd = tn.NoiseDraw(drawn, tn.noise_constants(noise, "cpu")) if noise else None
    rows_ctx, rows_tgt = (np.ascontiguousarray(a[:64]) for a in cy.train_rows)
    c = torch.from_numpy(np.asarray(S.net.input_ids(corpus.train[0][:64]), np.int64))
    t = torch.from_numpy(np.asarray(S.net.unit_ids(corpus.train[1][:64]), np.int64))
    n = 200
    means, errors = {}, {}
    for dropout, input_dropout in ((0.0, 0.0), (0.6, 0.0), (0.0, 0.5)):
        lc = np.array([cy.engine.step(rows_ctx, rows_tgt, drawn, dropout, 1000 * s + 1, False, 1.0, input_dropout)
                       for s in range(n)])
        lt = []
        for s in range(n):
            torch.manual_seed(s)
            with torch.no_grad():
                lt.append(float(tn.step_loss(P, S, c, t, nd, dropout, input_dropout, [])[0]))
        lt = np.array(lt)
        se = math.sqrt(lc.var() / n + lt.var() / n)
        assert abs(lc.mean() - lt.mean()) < 4 * se + 1e-6 * abs(lc.mean()), (dropout, input_dropout)
        means[dropout, input_dropout], errors[dropout, input_dropout] = lc.mean(), se
        if dropout or input_dropout:
            assert lc.std() > 0 and lt.std() > 0
    # dropout moves the mean loss by far more than the comparison's error: the test can tell
    for rates in ((0.6, 0.0), (0.0, 0.5)):
        assert abs(means[rates] - means[0.0, 0.0]) > 10 * errors[rates], (rates, means, errors)
