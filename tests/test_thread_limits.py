"""``threads=`` is checked and capped before it reaches an OpenMP team.

Unchecked, 10**9 made libgomp abort the interpreter ("Out of memory allocating
224000001344 bytes"), 100,000 crashed it, 30,000 hung and 5,000 took 12 s for 100
sentences.  Every API that takes a thread count refuses what is not an integer from
1 to MAX_THREADS and runs at most one thread per CPU it may use.  The refusals run
in a subprocess, so that the abort they replace fails the test instead of ending
the test run.
"""

import numpy as np
import pytest
from _bounded import ROOT, run_python

import nplm
from nplm import _kernels

from helpers import linear_spec, make_net

TOY_ARPA = ROOT / "examples" / "toy.arpa"
SENTENCES = ["the dog saw a cat", "w1 w2 w3", "a cat the dog"] * 40


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("threads")
    binary = str(d / "toy.nplm")
    nplm.build_binary(str(TOY_ARPA), binary)
    neural = str(d / "net.nplm")
    make_net("class-full-1").save(neural)
    spec = linear_spec(d / "mix.json", [binary, neural], [0.5, 0.5])
    return {"backoff": binary, "neural": neural, "interpolated": spec}


@pytest.mark.parametrize("kind", ["backoff", "neural", "interpolated"])
def test_absurd_thread_counts_are_refused_in_time(models, kind):
    code = f"""
import nplm
m = nplm.Model({models[kind]!r})
for bad in (10**9, 100000, 30000, 1025, 0, -1):
    try:
        m.score_sentences({SENTENCES!r}, threads=bad)
    except ValueError as e:
        assert "threads" in str(e), e
    else:
        raise SystemExit(f"threads={{bad}} was accepted")
for bad in (1.5, "2", True, None.__class__):
    try:
        m.score_sentences(["a b"], threads=bad)
    except TypeError:
        pass
    else:
        raise SystemExit(f"threads={{bad!r}} was accepted")
print("refused")
"""
    r = run_python(code, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "refused" in r.stdout


@pytest.mark.parametrize("kind", ["backoff", "neural", "interpolated"])
def test_the_most_threads_give_the_same_scores(models, kind):
    m = nplm.Model(models[kind])
    one = m.score_sentences(SENTENCES, threads=1)
    many = m.score_sentences(SENTENCES, threads=_kernels.MAX_THREADS)
    np.testing.assert_allclose(many, one, rtol=0, atol=1e-4)
    np.testing.assert_allclose(one, [m.score(s) for s in SENTENCES], rtol=0, atol=1e-3)


def test_team_is_capped_at_the_usable_cpus():
    cpus = _kernels.cpu_count()
    assert _kernels.thread_count(_kernels.MAX_THREADS) == cpus
    assert _kernels.thread_count(1) == 1
    assert _kernels.thread_count(np.int64(2)) == min(2, cpus)


def test_other_thread_arguments_are_checked(models, tmp_path):
    from nplm.compose.distil import distil
    from nplm.neural.network import NeuralNet
    from nplm.neural.train import TrainConfig
    teacher = nplm.Model(models["backoff"])
    with pytest.raises(ValueError, match="threads"):
        distil(teacher, 2, text=str(ROOT / "examples" / "toy.txt"), threads=10**9)
    net = NeuralNet.load(models["neural"])
    ctx = np.zeros((4, net.order - 1), np.int32)
    with pytest.raises(ValueError, match="threads"):
        net.log_prob(ctx, np.arange(4, dtype=np.int32) + 4, threads=10**9)
    with pytest.raises(ValueError, match="threads"):
        TrainConfig(threads=10**9).validate()
    mix = nplm.Model(models["interpolated"])
    with pytest.raises(ValueError, match="threads"):
        mix._data.mixture.tune(SENTENCES[:5], threads=10**9)
