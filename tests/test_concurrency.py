"""One loaded model queried from several Python threads at once.

Every query method must give exactly the single-threaded answers while other
threads hammer the same model object (batch kernels release the GIL; the
neural context cache and the log-linear Z cache are lock-protected).  What is
*not* shareable: a ``State`` object that two threads write at once (each thread
needs its own states), and changing an interpolated model's ``weights`` while
another thread queries it.
"""
import random
import threading
from pathlib import Path

import numpy as np
import pytest

import nplm
from nplm.backoff import arpa
from nplm.backoff import binary as backoff

ROOT = Path(__file__).resolve().parents[1]
TOY_ARPA = ROOT / "examples" / "toy.arpa"
TOY_TEXT = ROOT / "examples" / "toy.txt"
THREADS = 4


def sentences():
    lines = TOY_TEXT.read_text(encoding="utf-8").splitlines()
    extra = ["", "the the the", "unknown words here", "cat " * 300, "<s> the </s>", "the\tcat  sat"]
    # plus random word sequences over the text's words (more back-off paths, more overlap)
    words = sorted({w for line in lines for w in line.split()}) + ["oov1", "oov2"]
    rng = random.Random(11)
    extra += [" ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) for _ in range(200)]
    return lines + extra


def run_all(model, sents, order):
    """Every query method over ``sents`` (visited in ``order``), as plain values."""
    out = {}
    for i in order:
        s = sents[i]
        out[("score", i)] = (model.score(s), model.score(s, bos=False, eos=False))
        out[("full", i)] = tuple(tuple(r) for r in model.full_scores(s))
        out[("ppl", i)] = model.perplexity(s)
        state, nxt = nplm.State(), nplm.State()
        model.BeginSentenceWrite(state)
        scores = []
        for w in s.split():
            scores.append(model.BaseScore(state, w, nxt))
            state, nxt = nxt, state
        out[("base", i)] = (tuple(scores), state)
    subset = [sents[i] for i in order[:40]]
    out["batch"] = (tuple(model.score_sentences(subset)),)
    probs, lengths, oov, offsets = model.full_scores_batch(subset)
    out["fsb"] = (tuple(probs), tuple(lengths), tuple(oov), tuple(offsets))
    if getattr(model, "normalization", None) is None:
        out["batch2"] = tuple(model.score_sentences(subset, threads=2))
    return out


def hammer(model, sents, rounds=8):
    """Reference answers single-threaded, then THREADS threads at once, each
    visiting the sentences in its own order; every answer must be identical."""
    base_order = list(range(len(sents)))
    errors = []
    results = []
    barrier = threading.Barrier(THREADS)

    def work(seed):
        rng = random.Random(seed)
        try:
            barrier.wait()
            for _ in range(rounds):
                order = base_order[:]
                rng.shuffle(order)
                results.append((order, run_all(model, sents, order)))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a query thread hung"
    assert not errors, errors
    assert len(results) == THREADS * rounds
    for order, got in results:
        ref = run_all(model, sents, order)
        assert got.keys() == ref.keys()
        for k in ref:
            assert got[k] == ref[k], k


@pytest.fixture(scope="module")
def binary_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("conc") / "toy.nplm"
    backoff.build_binary(arpa.read_arpa(TOY_ARPA), path)
    return path


def test_backoff_binary_from_threads(binary_path):
    hammer(nplm.Model(str(binary_path)), sentences())


def test_arpa_model_from_threads():
    config = nplm.Config()
    config.arpa_complain = nplm.ARPALoadComplain.NONE
    config.show_progress = False
    hammer(nplm.Model(str(TOY_ARPA), config), sentences())


def test_lazy_mapped_binary_from_threads(binary_path):
    """Page faults of a lazily mapped file taken by several threads at once."""
    config = nplm.Config()
    config.load_method = nplm.LoadMethod.LAZY
    hammer(nplm.Model(str(binary_path), config), sentences())


@pytest.mark.parametrize("kind", ["softmax-full-2", "class-full-1", "tree-diag-1"])
def test_neural_model_from_threads(tmp_path, kind):
    """The neural context cache is shared by all threads (mutex-protected)."""
    from helpers import make_net
    net = make_net(kind, order=3)
    path = tmp_path / "net.nplm"
    net.save(path)
    model = nplm.Model(str(path))
    words = [f"w{i}" for i in range(40)]
    rng = random.Random(5)
    sents = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(60)]
    hammer(model, sents, rounds=2)


def test_loglinear_mixture_from_threads(binary_path):
    """The normalised log-linear model's Z cache is filled by several threads."""
    m = nplm.interpolate([str(binary_path), str(TOY_ARPA)], [0.6, 0.7], mode="loglinear")
    hammer(m, sentences()[:80], rounds=2)


def test_threads_results_equal_kenlm(binary_path):
    """The shared nplm model under threads agrees with the real kenlm module."""
    import kenlm
    ref = kenlm.Model(str(TOY_ARPA))
    model = nplm.Model(str(binary_path))
    sents = sentences()
    got = [None] * len(sents)

    def work(k):
        for i in range(k, len(sents), THREADS):
            got[i] = model.score(sents[i])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_allclose(got, [ref.score(s) for s in sents], rtol=0, atol=2e-5)


def test_mixture_with_neural_component_from_threads(tmp_path):
    """A linear mixture of a neural model (context cache) and a back-off model."""
    from helpers import make_net
    net_path = tmp_path / "net.nplm"
    make_net("softmax-full-2", order=3).save(net_path)
    rng = random.Random(3)
    words = [f"w{i}" for i in range(37)]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
                              for _ in range(300)) + "\n")
    kn = tmp_path / "kn.arpa"
    nplm.estimate(str(text), 3, arpa=str(kn), discount_fallback=True, progress=False)
    mix = nplm.interpolate([str(net_path), str(kn)], [0.4, 0.6])
    sents = [" ".join(rng.choice(words + ["oov"]) for _ in range(rng.randint(0, 10))) for _ in range(60)]
    hammer(mix, sents, rounds=2)


def test_a_loaded_model_is_not_reloaded_under_other_threads():
    """Model.__init__ again on a loaded model would free the tables another thread is
    scoring with (a segfault): it is refused, and the model goes on answering."""
    config = nplm.Config()
    config.arpa_complain = nplm.ARPALoadComplain.NONE
    config.show_progress = False
    model = nplm.Model(str(TOY_ARPA), config)
    expected = model.score("the cat sat on the mat")
    stop, seen = threading.Event(), []

    def score():
        while not stop.is_set():
            seen.append(model.score("the cat sat on the mat"))

    worker = threading.Thread(target=score)
    worker.start()
    try:
        with pytest.raises(RuntimeError, match="already loaded"):
            model.__init__(str(TOY_ARPA), config)
    finally:
        stop.set()
        worker.join()
    assert set(seen) == {expected} and model.score("the cat sat on the mat") == expected
