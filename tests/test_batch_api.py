"""score_sentences / full_scores_batch for every model kind (back-off, neural,
interpolated): the same arguments accepted and refused, blank sentences, and
totals accumulated as score() accumulates them."""
import numpy as np
import pytest

import nplm

from helpers import DATA, KINDS, REFERENCE, WORDS, make_net, need_shared, quiet_config, read_lines

NEURAL = [f"neural-{k}" for k in sorted(KINDS)] + ["neural-class-diag-2-unnormalized"]
MODELS = ["backoff", "mixture"] + NEURAL + ["neural-mixture"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Back-off models and the saved tiny nets, loaded once."""
    tmp = tmp_path_factory.mktemp("batch")
    out = {}
    for kind in KINDS:
        path = str(tmp / f"{kind}.nplm")
        make_net(kind).save(path)
        out[kind] = path
    return out


@pytest.fixture(scope="module", params=MODELS)
def model(request, built):
    """(name, model, sentences in the model's vocabulary: blank ones, a long one)."""
    name = request.param
    if name in ("backoff", "mixture"):
        need_shared()
        o3 = nplm.Model(str(REFERENCE / "ptb5k.o3.arpa.xz"), quiet_config())
        m = o3 if name == "backoff" else \
            nplm.interpolate([nplm.Model(str(REFERENCE / "ptb5k.o2.arpa.xz"), quiet_config()), o3], [0.4, 0.6])
        lines = read_lines(DATA / "ptb" / "ptb.valid.txt", limit=30)
    else:
        if name == "neural-mixture":
            m = nplm.interpolate([nplm.Model(built["class-full-1"]), nplm.Model(built["tree-diag-1"])],
                                 [0.5, 0.5])
        elif name.endswith("-unnormalized"):
            m = nplm.Model(built[name[len("neural-"):-len("-unnormalized")]], normalization="unnormalized")
        else:
            m = nplm.Model(built[name[len("neural-"):]])
        rng = np.random.default_rng(len(name))
        words = WORDS[4:] + ["zzqx"]
        lines = [" ".join(rng.choice(words, n)) for n in rng.integers(1, 25, 30)]
    words = " ".join(lines).split()
    long = " ".join(words[i % len(words)] for i in range(9000))
    lines = ["", lines[0], " \t", long] + lines[1:] + ["\n", ""]
    return name, m, lines


def _f32_total(items):
    """A float32 total of float32 items added in order, as score() makes it."""
    t = np.float32(0)
    for p in items:
        t = np.float32(t + np.float32(p))
    return float(t)


def _check_totals(name, m, batch, got, bos, eos):
    """score_sentences' totals ``got`` against full_scores_batch and score()."""
    probs, _, _, offsets = m.full_scores_batch(batch, bos=bos, eos=eos)
    assert got.tolist() == [_f32_total(probs[offsets[i]:offsets[i + 1]]) for i in range(len(batch))]
    single = [m.score(s, bos=bos, eos=eos) for s in batch]
    if not name.startswith("neural-") or name == "neural-mixture":
        assert got.tolist() == single          # one kernel path: the same bits
        return
    # A neural batch computes its items in blocks (BLAS, other summation orders),
    # which can differ from a single query's in the last bit.  Both totals add their
    # items the same way, so equal items give equal totals, and otherwise the items
    # are a few bits apart (test_neural_query's tolerance).
    for i, s in enumerate(batch):
        items = np.array([p for p, _, _ in m.full_scores(s, bos, eos)], np.float32)
        assert single[i] == _f32_total(items)
        mine = probs[offsets[i]:offsets[i + 1]]
        if np.array_equal(mine, items):
            assert got[i] == single[i]
        else:
            np.testing.assert_allclose(mine, items, rtol=0, atol=1e-5)


@pytest.mark.parametrize("bos,eos", [(True, True), (True, False), (False, False), (False, True)])
def test_blank_sentences(model, bos, eos):
    """A blank sentence scores 0 items without </s> (first, last or alone); the batch
    used to index past its end (IndexError) for neural models."""
    name, m, lines = model
    for batch in ([""], ["  "], [lines[1], ""], ["", lines[1]], ["", "\t", ""], [lines[1], "", lines[2], " "],
                  []):
        got = m.score_sentences(batch, bos=bos, eos=eos)
        assert got.dtype == np.float64 and got.shape == (len(batch),)
        _check_totals(name, m, batch, got, bos, eos)
        for i, s in enumerate(batch):
            if not s.strip() and not eos:
                assert got[i] == 0.0
        probs, _, _, offsets = m.full_scores_batch(batch, bos=bos, eos=eos)
        assert len(offsets) == len(batch) + 1 and offsets[-1] == len(probs)
        assert np.diff(offsets).tolist() == [len(list(m.full_scores(s, bos, eos))) for s in batch]


@pytest.mark.parametrize("bos,eos", [(True, True), (False, False)])
def test_totals_accumulate_like_score(model, bos, eos):
    """Each total is its items added in order in float32, as score() and kenlm add
    them; neural batches summed in float64 drifted from score() (0.74 log10 on a
    9000-word sentence of a trained model)."""
    name, m, lines = model
    _check_totals(name, m, lines, m.score_sentences(lines, bos=bos, eos=eos), bos, eos)


def test_iterables_of_sentences(model, tmp_path):
    """Any iterable of str/bytes is scored like the list of its items."""
    _, m, lines = model
    short = lines[:3] + lines[4:8]
    expect = m.score_sentences(short).tolist()
    assert m.score_sentences(iter(short)).tolist() == expect
    assert m.score_sentences(s for s in short).tolist() == expect
    assert m.score_sentences(tuple(short), threads=2).tolist() == expect
    assert m.score_sentences([s.encode() for s in short]).tolist() == expect
    path = tmp_path / "text.txt"
    path.write_text("\n".join(short) + "\n")
    with open(path) as f:
        assert m.score_sentences(f).tolist() == expect
    got = m.full_scores_batch(iter(short))
    for a, b in zip(got, m.full_scores_batch(short)):
        assert np.array_equal(a, b)


def test_bad_arguments(model):
    """The same errors for every model kind, raised before any scoring."""
    _, m, lines = model
    for batch_api in (m.score_sentences, m.full_scores_batch):
        for single in (lines[1], lines[1].encode()):
            with pytest.raises(TypeError, match=f"list of sentences, got a single {type(single).__name__}"):
                batch_api(single)
        with pytest.raises(TypeError, match="sentence 0 is NoneType, expected str or bytes"):
            batch_api([None])
        with pytest.raises(TypeError, match="sentence 2 is int"):
            batch_api([lines[1], "", 7])
        with pytest.raises(TypeError, match="list of sentences .* got int"):
            batch_api(5)
    for threads in (0, -1):
        with pytest.raises(ValueError, match="threads must be from 1 to"):
            m.score_sentences(lines[:2], threads=threads)
    for threads in ("2", 1.5):
        with pytest.raises(TypeError, match="threads must be an integer"):
            m.score_sentences(lines[:2], threads=threads)
    assert m.score_sentences(lines[:2], threads=None).tolist() == m.score_sentences(lines[:2]).tolist()


_THREADS_SCRIPT = """
import os, sys, nplm
def tasks(): return len(os.listdir("/proc/self/task"))
m = nplm.Model(sys.argv[1])
lines = [" ".join(["w%d" % (i % 37) for i in range(j, j + 30)]) for j in range(3000)]
before = tasks()
kw = {} if sys.argv[2] == "default" else {"threads": int(sys.argv[2])}
total = m.score_sentences(lines, **kw).sum()
print(tasks() - before, repr(total))
"""


def test_neural_threads_set_the_kernels_openmp_team(built, tmp_path):
    """threads= of a neural model's score_sentences is the OpenMP team of its batch
    kernels (it was checked, then ignored: threads=1 still started OMP_NUM_THREADS
    threads).  Counted as the threads a fresh process gains; the totals stay equal."""
    import os
    import subprocess
    import sys
    script = tmp_path / "threads.py"
    script.write_text(_THREADS_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="4", NPLM_SIMD="none")
    got = {}
    for threads in ("default", "1", "2"):
        out = subprocess.run([sys.executable, str(script), built["class-full-1"], threads], env=env,
                             capture_output=True, text=True, check=True).stdout.split()
        got[threads] = (int(out[0]), out[1])
    assert got["default"][0] == 3 and got["1"][0] == 0 and got["2"][0] == 1, got
    assert got["default"][1] == got["1"][1] == got["2"][1]


def test_mixture_helpers_check_arguments_alike(built):
    """An InterpolatedModel's other batch methods take sentences and threads the same way."""
    mix = nplm.interpolate([nplm.Model(built["class-full-1"]), nplm.Model(built["tree-full-1"])], [0.5, 0.5],
                           "loglinear")
    lines = ["w1 w2 w3", "", "w4 zzqx"]
    for method in (mix.component_scores, mix.context_buckets):
        with pytest.raises(TypeError, match="got a single str"):
            method("w1 w2 w3")
        with pytest.raises(TypeError, match="sentence 1 is NoneType"):
            method(["w1", None])
        assert np.array_equal(method(iter(lines)), method(lines))
    for threads in (0, -1):
        with pytest.raises(ValueError, match="threads must be from 1 to"):
            mix.tune(lines, threads=threads)
    assert mix.weights.tolist() == [0.5, 0.5]       # refused before anything changed
