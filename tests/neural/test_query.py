"""Neural models through the kenlm API: every normalisation mode against an
independent numpy forward pass, distributions summing to one, fallback tables."""
import numpy as np
import pytest

import nplm
from nplm.neural.query import precompute
from nplm.neural.vocab import BOS, NULL

from helpers import KINDS, make_net, numpy_log_dist

LN10 = np.log(10.0)


def _run_at_simd(level, script, *args):
    """Run a probe script in a fresh interpreter with NPLM_SIMD=level ("" for this
    machine's best kernels), this checkout first on the path; its stderr is the
    failure message if it exits non-zero."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(nplm.__file__))
    env = dict(os.environ, NPLM_SIMD=level,
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(script), *map(str, args)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module", params=sorted(KINDS))
def saved(request, tmp_path_factory):
    net = make_net(request.param)
    path = tmp_path_factory.mktemp("nn") / f"{request.param}.nplm"
    net.save(str(path))
    return request.param, net, str(path)


def _state_after(model, words, bos=True):
    s, out = nplm.State(), nplm.State()
    (model.BeginSentenceWrite if bos else model.NullContextWrite)(s)
    for w in words:
        model.BaseScore(s, w, out)
        s, out = out, s
    return s


def _ctx(net, words, bos=True):
    m = net.order - 1
    ids = ([BOS] if bos else []) + [net.vocab.id(w) for w in words]
    ids = ids[-m:] if ids else []
    return [NULL] * (m - len(ids)) + ids


@pytest.mark.parametrize("history", [[], ["w1"], ["w2", "w9"], ["w4", "w0", "w30", "w7", "w2"]])
def test_exact_distribution_matches_numpy_and_sums_to_one(saved, history):
    kind, net, path = saved
    m = nplm.Model(path)
    assert m.normalization == {"softmax": "exact", "class": "class", "tree": "tree"}[net.config.output]
    for bos in (True, False):
        s = _state_after(m, history, bos)
        dist = m.log10_distribution(s).astype(np.float64)
        ref = numpy_log_dist(net, _ctx(net, history, bos)) / LN10
        np.testing.assert_allclose(dist, ref, atol=2e-5)
        assert (10 ** dist).sum() == pytest.approx(1.0, abs=1e-5)
        # BaseFullScore agrees, and ngram_length = real context used + 1
        out = nplm.State()
        r = m.BaseFullScore(s, "w3", out)
        assert r.log_prob == pytest.approx(ref[net.vocab.id("w3")], abs=2e-5)
        assert r.ngram_length == min(len(history) + bos, net.order - 1) + 1


def test_unnormalized_is_the_raw_score(saved):
    kind, net, path = saved
    m = nplm.Model(path, normalization="unnormalized")
    assert "unnormalized" in repr(m)
    s = _state_after(m, ["w5", "w6"])
    got = m.log10_distribution(s).astype(np.float64)
    if net.config.output == "tree":
        ref = numpy_log_dist(net, _ctx(net, ["w5", "w6"])) / LN10     # exact by construction
        np.testing.assert_allclose(got, ref, atol=2e-5)
    else:
        exact = nplm.Model(path).log10_distribution(s).astype(np.float64)
        shift = got - exact          # softmax: one log Z for all words; class: one per class
        if net.config.output == "softmax":
            assert np.ptp(shift) < 1e-4
            assert (10 ** got).sum() != pytest.approx(1.0, abs=1e-3)
        else:
            wc = net.structs["word_class"]
            for c in np.unique(wc):
                assert np.ptp(shift[wc == c]) < 1e-4


def test_normalization_errors(saved, tmp_path):
    kind, net, path = saved
    other = {"softmax": "class", "class": "tree", "tree": "class"}[net.config.output]
    with pytest.raises(ValueError, match=other):
        nplm.Model(path, normalization=other)
    with pytest.raises(ValueError, match="normalization must be one of"):
        nplm.Model(path, normalization="bogus")
    if net.config.output == "softmax":
        with pytest.raises(OSError, match="precompute"):
            nplm.Model(path, normalization="fallback")


def test_batch_equals_single(saved):
    _, net, path = saved
    for mode in (None, "unnormalized"):
        m = nplm.Model(path, normalization=mode)
        lines = ["w1 w2 w3 w4 w5 w6", "w7 zzz w9", "", "w3"]
        for bos, eos in [(True, True), (False, True), (True, False), (False, False)]:
            p, l, o, off = m.full_scores_batch(lines, bos, eos)
            single = [x for line in lines for x in m.full_scores(line, bos, eos)]
            assert len(single) == len(p) == off[-1]
            np.testing.assert_allclose(p, [x[0] for x in single], atol=1e-5)
            assert l.tolist() == [x[1] for x in single]
            assert o.tolist() == [x[2] for x in single]
            np.testing.assert_allclose(m.score_sentences(lines, bos, eos),
                                       [m.score(x, bos, eos) for x in lines], atol=1e-4)


def test_fallback_tables(tmp_path):
    net = make_net("softmax-full-2", order=4)
    path = str(tmp_path / "fb.nplm")
    net.save(path)
    text = tmp_path / "train.txt"
    text.write_text("w1 w2 w3 w4\nw1 w2 w3 w5\nw1 w2 w9\nw8 w1 w2 w3 w4\n")
    sizes = precompute(path, str(text), min_count=2, progress=False)
    assert sizes[0] == 1 and sizes[1] == len(net.vocab) - 1
    exact = nplm.Model(path)
    fb = nplm.Model(path, normalization="fallback")
    assert "fallback" in repr(fb)
    # "<s> w1 w2" was seen twice or more: the full 3-word context is stored.
    s = _state_after(fb, ["w1", "w2"])
    o1, o2 = nplm.State(), nplm.State()
    r = fb.BaseFullScore(s, "w3", o1)
    e = exact.BaseFullScore(s, "w3", o2)
    assert r.log_prob == pytest.approx(e.log_prob, abs=1e-5) and r.ngram_length == e.ngram_length == 4
    # "w9 w8 w1" was never seen: falls back to the stored 2-word context "w8 w1"?
    # No: "w8 w1" occurs once (< 2) -> falls back to the one-word context "w1".
    s = _state_after(fb, ["w9", "w8", "w1"])
    r = fb.BaseFullScore(s, "w2", o1)
    short = numpy_log_dist(net, [NULL, NULL, net.vocab.id("w1")]) / LN10
    assert r.ngram_length == 2
    assert r.log_prob == pytest.approx(short[net.vocab.id("w2")], abs=2e-5)
    # "w1 w2" (2 words) stored -> ngram_length 3 and equal to exact of the shortened context.
    s = _state_after(fb, ["w7", "w1", "w2"])
    r = fb.BaseFullScore(s, "w3", o1)
    short = numpy_log_dist(net, [NULL, net.vocab.id("w1"), net.vocab.id("w2")]) / LN10
    assert r.ngram_length == 3 and r.log_prob == pytest.approx(short[net.vocab.id("w3")], abs=2e-5)
    # batch path agrees with BaseScore chains
    lines = ["w9 w8 w1 w2 w3", "w1 w2 w3 w4", "w7 w7 w7"]
    p, l, o, off = fb.full_scores_batch(lines)
    single = [x for line in lines for x in fb.full_scores(line)]
    np.testing.assert_allclose(p, [x[0] for x in single], atol=1e-5)
    assert l.tolist() == [x[1] for x in single]


@pytest.mark.parametrize("dtype,tol", [("float16", 2e-3), ("int8", 5e-2)])
def test_quantised_models_load_through_model(saved, tmp_path, dtype, tol):
    from nplm.neural.quantized_files import quantize_file
    kind, net, path = saved
    q = str(tmp_path / f"q-{dtype}.nplm")
    quantize_file(path, q, dtype)
    a, b = nplm.Model(path), nplm.Model(q)
    assert b.normalization == a.normalization
    lines = ["w1 w2 w3 w4 w5", "w9 w8 w7", ""]
    np.testing.assert_allclose(b.score_sentences(lines), a.score_sentences(lines), atol=tol * 10)
    s = _state_after(b, ["w2", "w3"])
    assert (10 ** b.log10_distribution(s).astype(np.float64)).sum() == pytest.approx(1.0, abs=1e-5)


_SIMD_SCRIPT = r"""
import sys, numpy as np, nplm, nplm.neural.query as nm
from nplm.neural.vocab import BOS, NULL
if sys.argv[3] == "direct":
    nm.PRECOMPUTE_BYTES = 0          # no first-layer table: the input vecmat runs
path, out = sys.argv[1], sys.argv[2]
import nplm.neural._query as q
rows = {"exact": [], "unnormalized": []}
for mode in rows:
    m = nplm.Model(path, normalization=mode)
    rng = np.random.default_rng(3)
    words = m.vocab.words()
    for _ in range(12):
        s, o = nplm.State(), nplm.State()
        m.BeginSentenceWrite(s)
        for w in rng.choice(words[4:], 3):
            m.BaseScore(s, str(w), o)
            s, o = o, s
        rows[mode].append(m.log10_distribution(s).astype(np.float64) if mode == "exact" else
                          np.array([m.BaseScore(s, str(w), o) for w in words[2:]]))
np.savez(out, **{k: np.array(v) for k, v in rows.items()})
print(q.SIMD)
"""


@pytest.mark.parametrize("table", ["table", "direct"])
def test_every_simd_path_gives_the_same_probabilities(tmp_path, table):
    """The AVX-512, AVX2 and plain kernels (picked by CPU features, forced down with
    NPLM_SIMD) agree on a network wide enough for every blocking branch: more than 256
    outputs and, without the first-layer table, more than 1024 inputs to one layer."""
    from nplm.neural.network import NeuralConfig, NeuralNet
    from nplm.neural.vocab import Vocabulary

    from helpers import COUNTS, WORDS, randomise
    cfg = NeuralConfig(order=4, embedding_dim=400, hidden=(300, 270), context="full", output="softmax",
                       objective="mle")
    net = randomise(NeuralNet.create(cfg, Vocabulary(WORDS, COUNTS), seed=2), 5, scale=0.05)
    path = tmp_path / "wide.nplm"
    net.save(str(path))
    script = tmp_path / "probe.py"
    script.write_text(_SIMD_SCRIPT)
    results, levels = {}, []
    for level in ("", "avx2", "none"):
        out = tmp_path / f"r{level or 'best'}.npz"
        done = _run_at_simd(level, script, path, out, table)
        levels.append(done.stdout.strip())
        results[level] = dict(np.load(out))
    assert levels[2] == "x86-64" and levels[1] in ("avx2+fma", "x86-64")
    for level in ("avx2", "none"):
        for mode in ("exact", "unnormalized"):
            np.testing.assert_allclose(results[level][mode], results[""][mode], atol=2e-5)
    # and the exact rows are the numpy forward pass
    m = nplm.Model(str(path))
    rng = np.random.default_rng(3)
    words = m.vocab.words()
    for i in range(12):
        hist = [str(w) for w in rng.choice(words[4:], 3)]
        ref = numpy_log_dist(net, _ctx(net, hist)) / LN10
        np.testing.assert_allclose(results[""]["exact"][i], ref, atol=2e-5)


_CLASS_SCRIPT = r"""
import sys, numpy as np, nplm
path, out = sys.argv[1], sys.argv[2]
import nplm.neural._query as q
m = nplm.Model(path)
rng = np.random.default_rng(4)
words = m.vocab.words()
rows = []
for _ in range(6):
    hist = [str(w) for w in rng.choice(words[4:], 3)]
    row = []
    for w in ["</s>"] + words[4:]:
        m.core.clear_cache()             # a new context for every word: both normalisers again
        s, o = nplm.State(), nplm.State()
        m.BeginSentenceWrite(s)
        for h in hist:
            m.BaseScore(s, h, o)
            s, o = o, s
        row.append(m.BaseScore(s, str(w), o))
    rows.append((hist, row))
# the same rows through the batch path (a ReLU net's: row by row in class order)
V = len(words)
ctx = np.array([[m.vocab.id(h) for h in hist] for hist, _ in rows for _ in range(V - 3)], np.int32)
ids = np.array([m.vocab.id("</s>")] + list(range(4, V)), np.int32)
batch = m.core.log_probs(ctx, np.tile(ids, len(rows))).reshape(len(rows), -1) / np.log(10)
np.savez(out, hist=np.array([h for h, _ in rows]), probs=np.array([r for _, r in rows]), batch=batch)
print(q.SIMD)
"""


def _uneven_class_net(width):
    """A ReLU class net of 600 words whose classes are wider than one 256-float
    register block (297 words), narrower than a vector (3) and in between."""
    from nplm.neural.network import NeuralConfig, NeuralNet
    from nplm.neural.vocab import SPECIALS, Vocabulary

    from helpers import randomise
    words = list(SPECIALS) + [f"v{i}" for i in range(596)]
    V = len(words)
    word_class = np.zeros(V, np.int32)
    word_class[3:300] = 1
    word_class[300:303] = 2
    word_class[303:] = 3
    cfg = NeuralConfig(order=4, embedding_dim=6, hidden=(width,), context="full", output="class",
                       objective="mle", classes=4)
    return randomise(NeuralNet.create(cfg, Vocabulary(words, np.arange(V, 0, -1)), word_class=word_class,
                                      seed=3), 6, scale=0.3)


@pytest.mark.parametrize("width", [37, 1037])
def test_class_normalisers_of_new_contexts_on_every_simd_path(tmp_path, width):
    """Exact class mode reads transposed class blocks for a new context and for every
    row of a batch: classes wider than one 256-float register block, narrower than a
    vector, and a hidden width that is no multiple of 16, on the AVX-512, AVX2 and
    plain kernels, against numpy.  The wide net passes the 1024 inputs that the shared
    nonzero gather holds at once."""
    net = _uneven_class_net(width)
    V = len(net.vocab)
    path = tmp_path / "cls.nplm"
    net.save(str(path))
    script = tmp_path / "probe.py"
    script.write_text(_CLASS_SCRIPT)
    levels = []
    for level in ("", "avx2", "none"):
        out = tmp_path / f"c{level or 'best'}.npz"
        done = _run_at_simd(level, script, path, out)
        levels.append(done.stdout.strip())
        res = np.load(out)
        for hist, probs, batch in zip(res["hist"], res["probs"], res["batch"]):
            ref = numpy_log_dist(net, _ctx(net, [str(h) for h in hist])) / LN10
            ref = ref[[net.vocab.id("</s>")] + list(range(4, V))]
            np.testing.assert_allclose(probs, ref, atol=2e-5, err_msg=level or "best")
            np.testing.assert_allclose(batch, ref, atol=2e-5, err_msg=f"batch {level or 'best'}")
    assert levels[2] == "x86-64"


_HALF_COPIES_SCRIPT = """
import sys
import numpy as np
import nplm
import nplm.neural._query as q
path, ctx_file, out = sys.argv[1:4]
ctx = np.load(ctx_file)
hists = [[], ["v3"], ["v301", "v9", "v500"], ["v200", "v2"]]
res, flags = {}, []
for half in (True, False):
    q.HALF_COPIES = half
    m = nplm.Model(path)
    flags.append(m.core.half_class_copies)
    words = ["</s>"] + [w for w in m.vocab.words() if w.startswith("v")]
    ids = np.array([m.vocab.id(w) for w in words], np.int32)
    single = []
    for h in hists:
        s, o = nplm.State(), nplm.State()
        m.BeginSentenceWrite(s)
        for w in h:
            m.BaseScore(s, w, o); s, o = o, s
        for w in words:
            m.core.clear_cache()         # a new context for every word
            single.append(m.BaseScore(s, w, o))
    u = np.random.default_rng(5).random((len(ctx), 2))
    res[f"single{int(half)}"] = np.array(single)
    res[f"batch{int(half)}"] = m.core.log_probs(ctx, np.tile(ids, len(hists)))
    res[f"sample{int(half)}"] = m.core.sample_class_rows(ctx, u)
np.savez(out, flags=np.array(flags), **res)
print(q.SIMD, q.F16C)
"""


@pytest.mark.parametrize("level", ["", "avx2"])
@pytest.mark.parametrize("width", [37, 1037])
def test_float16_class_copies_give_the_float32_bits(tmp_path, level, width):
    """A float16 model's class products read float16 copies of its weights on AVX-512
    and on AVX2 with F16C.  Its weights are exactly float16, so each converted weight
    is the float32 one and every score must have the float32 kernels' bits: single
    queries of new contexts, batches and sampled words, with the copies on and off.
    (``nplm convert --to float16`` makes such a model; here the weights are rounded in
    place.)"""
    net = _uneven_class_net(width)
    for v in net.params.values():
        v[...] = v.astype(np.float16).astype(np.float32)
    path = tmp_path / "h.nplm"
    net.save(str(path))
    hists = [[], ["v3"], ["v301", "v9", "v500"], ["v200", "v2"]]
    V = len(net.vocab)
    ids = np.array([net.vocab.id("</s>")] + list(range(4, V)), np.int32)
    np.save(tmp_path / "ctx.npy", np.array([_ctx(net, h) for h in hists for _ in ids], np.int32))
    script = tmp_path / "probe.py"
    script.write_text(_HALF_COPIES_SCRIPT)
    simd, f16c = _run_at_simd(level, script, path, tmp_path / "ctx.npy", tmp_path / "r.npz").stdout.split()
    if level and simd != "avx2+fma":
        pytest.skip("this CPU has no AVX2 (the path under test)")
    res = np.load(tmp_path / "r.npz")
    copies = simd == "avx512" or (simd == "avx2+fma" and f16c == "True")
    assert list(res["flags"]) == [copies, False]
    for part in ("single", "batch", "sample"):
        np.testing.assert_array_equal(res[part + "1"], res[part + "0"], err_msg=part)
    ref = np.concatenate([numpy_log_dist(net, _ctx(net, h))[ids] for h in hists]) / LN10
    np.testing.assert_allclose(res["single1"], ref, atol=2e-5)


@pytest.mark.parametrize("shape", [("full", (12,), "class", "relu"), ("diagonal", (), "class", "relu"),
                                   ("diagonal", (7,), "softmax", "relu"), ("full", (12,), "tree", "relu"),
                                   ("diagonal", (9,), "tree", "tanh")])
@pytest.mark.parametrize("table", [True, False])
def test_float16_weights_stay_float16_and_give_the_float32_bits(tmp_path, monkeypatch, shape, table):
    """A float16 model's embedding and output matrices are read as float16 by a ReLU
    net's query core on AVX-512, so they are never converted (they stay memory-mapped):
    every mode's single queries of new contexts, distributions, batches and samples
    have the bits of the same core over float32 copies.  Nets of other activations
    convert them.  ``table``: a full context through the first-layer table, or (off)
    through the embedding rows."""
    import nplm.neural._query as q
    import nplm.neural.query as nm

    from helpers import WORDS
    context, hidden, output, act = shape
    if not table:
        monkeypatch.setattr(nm, "PRECOMPUTE_BYTES", 0)
    net, path = _float16_model(tmp_path, context, hidden, output, act, seed=2)
    modes = [None, "unnormalized"]
    if output == "softmax":
        text = tmp_path / "t.txt"
        text.write_text("w1 w2 w3\nw1 w2 w3 w4\nw5 w1 w2\n")
        precompute(path, str(text), 1, progress=False)
        modes.append("fallback")
    hists = [[], ["w3"], ["w1", "w2"], ["w9", "w30", "w2", "w5"]]
    words = ["</s>"] + WORDS[4:]
    len(WORDS)
    ctx = np.array([_ctx(net, h) for h in hists for _ in words], np.int32)
    ids = np.tile([net.vocab.id(w) for w in words], len(hists)).astype(np.int32)
    u = np.random.default_rng(3).random((len(ctx), 2))
    for mode in modes:
        got = {}
        for half in (True, False):
            monkeypatch.setattr(q, "HALF_WEIGHTS", half)
            m = nplm.Model(path, normalization=mode)
            assert m.core.half_weights == (half and q.SIMD != "x86-64" and act == "relu")
            single = []
            for h in hists:
                s, out = _state_after(m, h), nplm.State()
                for w in words:
                    m.core.clear_cache()
                    single.append(m.BaseScore(s, w, out))
            dists = [m.log10_distribution(_state_after(m, h)) for h in hists]
            got[half] = [np.array(single), np.array(dists), m.core.log_probs(ctx, ids)]
            if m.core.samples_classes:
                got[half].append(m.core.sample_class_rows(ctx, u))
            if half and m.core.half_weights:
                kept = {"out_w", "cls_w"} | (set() if context == "full" and table else {"emb"})
                assert not (m._data.net.params.converted() & kept)
        for a, b in zip(got[True], got[False]):
            np.testing.assert_array_equal(a, b)
    # and the values are the float16 net's (numpy over its float32 conversion)
    rounded = _f16(net)
    ref = np.concatenate([numpy_log_dist(rounded, _ctx(net, h))[[net.vocab.id(w) for w in words]]
                          for h in hists]) / LN10
    m = nplm.Model(path)
    single = []
    for h in hists:
        s, out = _state_after(m, h), nplm.State()
        single.extend(m.BaseScore(s, w, out) for w in words)
    np.testing.assert_allclose(single, ref, atol=2e-5)


def _float16_model(tmp_path, context, hidden, output, act, seed):
    """(net, path of its float16 conversion): a random order-4 net over the fixture
    vocabulary, 21-d embeddings (no multiple of 8 or 16)."""
    from nplm.neural.clusters import frequency_bins, huffman_tree
    from nplm.neural.network import NeuralConfig, NeuralNet
    from nplm.neural.quantized_files import quantize_file
    from nplm.neural.vocab import Vocabulary

    from helpers import COUNTS, WORDS, randomise
    cfg = NeuralConfig(order=4, embedding_dim=21, hidden=hidden, context=context, output=output,
                       objective="mle", classes=5, activation=act)
    t = huffman_tree(COUNTS) if output == "tree" else None
    net = randomise(NeuralNet.create(cfg, Vocabulary(WORDS, COUNTS), seed=seed,
                                     word_class=frequency_bins(COUNTS, 5) if output == "class" else None,
                                     tree=(t.points, t.codes, t.lengths) if t else None), seed + 2)
    src, path = str(tmp_path / "f32.nplm"), str(tmp_path / "f16.nplm")
    net.save(src)
    quantize_file(src, path, "float16")
    return net, path


_HALF_SCRIPT = r"""
import sys, numpy as np, nplm
import nplm.neural._query as q
import nplm.neural.query as nm
nm.PRECOMPUTE_BYTES = 0 if sys.argv[2] == "rows" else nm.PRECOMPUTE_BYTES
path, ctx, words = sys.argv[1], np.load(sys.argv[3]), np.load(sys.argv[4])
if q.SIMD != "avx2+fma":
    print(q.SIMD, "-")             # no AVX2 on this CPU: nothing to compare
    sys.exit(0)
got = []
for half in (True, False):
    q.HALF_WEIGHTS = half
    for mode in (None, "unnormalized"):
        m = nplm.Model(path, normalization=mode)
        assert m.core.half_weights == half, (half, m.core.half_weights)
        s, out, single = nplm.State(), nplm.State(), []
        for c, w in zip(ctx, words):
            m.NullContextWrite(s)
            for x in c:
                m.BaseScore(s, m.vocab.word(int(x)), out); s, out = out, s
            m.core.clear_cache()
            single.append(m.BaseScore(s, m.vocab.word(int(w)), out))
        got.append((np.array(single), m.core.log_probs(ctx, words)))
same = all(np.array_equal(a, b) for x, y in zip(got[:2], got[2:]) for a, b in zip(x, y))
print(q.SIMD, same)
"""


@pytest.mark.parametrize("output,context", [("class", "diagonal"), ("softmax", "full"), ("tree", "full")])
@pytest.mark.parametrize("first_layer", ["table", "rows"])
def test_float16_weights_on_the_avx2_path(tmp_path, output, context, first_layer):
    """Without AVX-512 (AVX2 with F16C) a float16 ReLU net's embedding and output
    matrices are read as float16 too, by the AVX2 twins of the row kernels: single
    queries of new contexts and batches have the bits of float32 copies."""
    from helpers import WORDS
    net, path = _float16_model(tmp_path, context, (13,) if context == "full" else (), output, "relu", seed=6)
    rng = np.random.default_rng(9)
    np.save(tmp_path / "ctx.npy", rng.integers(4, len(WORDS), (60, 3)).astype(np.int32))
    np.save(tmp_path / "w.npy", rng.integers(2, len(WORDS), 60).astype(np.int32))
    script = tmp_path / "probe.py"
    script.write_text(_HALF_SCRIPT)
    done = _run_at_simd("avx2", script, path, first_layer, tmp_path / "ctx.npy", tmp_path / "w.npy")
    if done.stdout.split()[0] != "avx2+fma":
        pytest.skip("this CPU has no AVX2 (the path under test)")
    assert done.stdout.split() == ["avx2+fma", "True"]


def _f16(net):
    """The net with every quantised matrix rounded to float16, as the file holds it."""
    import copy

    from nplm.neural.quantize import MATRICES
    net = copy.deepcopy(net)
    for name in MATRICES:
        if net.params[name].ndim == 2 and net.params[name].size:
            net.params[name] = net.params[name].astype(np.float16).astype(np.float32)
    return net


@pytest.mark.parametrize("l3_bytes", [0, 1 << 40])
def test_class_block_prefetch_changes_no_score(tmp_path, monkeypatch, l3_bytes):
    """Class blocks larger than half the L3 cache are prefetched for a new context (a
    hint: the scores must not change).  The cache size is faked both ways so that the
    small test net takes each path; every word of a new context matches numpy."""
    import nplm.neural._query as q
    from nplm.io.resources import l3_cache_bytes
    assert l3_cache_bytes() > 0
    monkeypatch.setattr(q, "l3_cache_bytes", lambda: l3_bytes)
    net = make_net("class-full-1")
    path = tmp_path / "c.nplm"
    net.save(str(path))
    m = nplm.Model(str(path))
    assert m.core.prefetches_class_blocks == (l3_bytes == 0)
    words = m.vocab.words()
    hist = ["w3", "w8", "w1"]
    ref = numpy_log_dist(net, _ctx(net, hist)) / LN10
    s = _state_after(m, hist)
    out = nplm.State()
    for w in ["</s>"] + words[4:]:
        m.core.clear_cache()             # a new context for every word: both products again
        assert m.BaseScore(s, w, out) == pytest.approx(ref[net.vocab.id(w)], abs=2e-5), w


_SOFTMAX_BATCH_SCRIPT = r"""
import sys, numpy as np, nplm
import nplm.neural._query as q
path, ctx, words, out = sys.argv[1:5]
m = nplm.Model(path)
np.save(out, m.core.log_probs(np.load(ctx), np.load(words)))
print(q.SIMD, m.core.sparse_softmax_batches)
"""


@pytest.mark.parametrize("dead", [False, True])
def test_batched_softmax_normalisers_on_every_simd_path(tmp_path, dead):
    """Exact softmax batches: on AVX-512 the normalisers come from sparse products over
    packed panels of 64 words with an online log-sum-exp, elsewhere from sgemm.  A
    vocabulary of 3 panels and a partial one, a hidden width that is no multiple of 16,
    1101 rows (blocks of 512 split between two threads, the last one odd), every path
    against numpy; ``dead`` makes every hidden unit zero (no products at all)."""
    from nplm.neural.network import NeuralConfig, NeuralNet
    from nplm.neural.vocab import SPECIALS, Vocabulary

    from helpers import randomise
    words = list(SPECIALS) + [f"v{i}" for i in range(199)]
    V = len(words)
    cfg = NeuralConfig(order=4, embedding_dim=6, hidden=(40, 37), context="full", output="softmax",
                       objective="mle")
    net = randomise(NeuralNet.create(cfg, Vocabulary(words, np.arange(V, 0, -1)), seed=5), 7, scale=0.5)
    if dead:
        net.params["b1"][...] = -1e3             # the last layer's bias (w1: 40 x 37)
    path = tmp_path / "sm.nplm"
    net.save(str(path))
    rng = np.random.default_rng(12)
    n = 1101
    ctx = rng.integers(0, V, (n, 3)).astype(np.int32)
    tgt = rng.integers(2, V, n).astype(np.int32)
    np.save(tmp_path / "ctx.npy", ctx)
    np.save(tmp_path / "tgt.npy", tgt)
    script = tmp_path / "probe.py"
    script.write_text(_SOFTMAX_BATCH_SCRIPT)
    checked = list(range(0, n, 37)) + [255, 256, 511, 512, 767, 1023, 1024, n - 1]
    ref = np.array([numpy_log_dist(net, ctx[i])[tgt[i]] for i in checked])
    kernels = {}
    for level in ("", "avx2", "none"):
        out = tmp_path / f"s{level or 'best'}.npy"
        done = _run_at_simd(level, script, path, tmp_path / "ctx.npy", tmp_path / "tgt.npy", out)
        simd, sparse = done.stdout.split()
        kernels[simd] = sparse
        np.testing.assert_allclose(np.load(out)[checked], ref, atol=2e-5, err_msg=level or "best")
    assert kernels["x86-64"] == "False"
    if "avx512" in kernels:
        assert kernels["avx512"] == "True"
    # the two threads' halves of a block share no scratch: small batches (the threads
    # start together) on a net narrower than one vector give the bits of one-row batches
    # (with the packed panels; elsewhere a batch's normalisers come from one sgemm,
    # whose blocking differs from a one-row product's in the last bits)
    narrow = tmp_path / "narrow.nplm"
    make_net("softmax-full-2").save(str(narrow))
    m = nplm.Model(str(narrow))
    small = np.minimum(ctx[:14], len(m.vocab) - 1), np.minimum(tgt[:14], len(m.vocab) - 1)
    alone = np.concatenate([m.core.log_probs(small[0][i:i + 1], small[1][i:i + 1]) for i in range(14)])
    for _ in range(500):
        together = m.core.log_probs(*small)
        if m.core.sparse_softmax_batches:
            assert np.array_equal(together, alone)
        else:
            np.testing.assert_allclose(together, alone, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["class-full-1", "class-diag-2"])
def test_batched_class_scoring_matches_numpy_across_blocks(tmp_path, kind):
    """The batch path of a ReLU net scores rows one by one in class order; other nets
    group rows by class in blocks of 2048 (BLAS for crowded classes, dot products for
    the rest): every row, across block boundaries, is the numpy value."""
    net = make_net(kind)
    path = tmp_path / "c.nplm"
    net.save(str(path))
    m = nplm.Model(str(path))
    rng = np.random.default_rng(11)
    V, n = len(net.vocab), 4500
    ctx = rng.integers(0, V, (n, net.order - 1)).astype(np.int32)
    words = rng.integers(2, V, n).astype(np.int32)          # any word but <unk>, <s>
    words[words == NULL] = 5
    got = m.core.log_probs(ctx, words)
    for i in list(range(0, n, 97)) + [2046, 2047, 2048, 2049, n - 1]:
        ref = numpy_log_dist(net, ctx[i])[words[i]]
        assert got[i] == pytest.approx(ref, abs=5e-5), i
    # a handful of rows leaves every class below the BLAS threshold: the dot-product branch
    np.testing.assert_allclose(m.core.log_probs(ctx[:6], words[:6]), got[:6], atol=5e-5)
    # unnormalised rows go through the batch in class order (a ReLU net's) or by BLAS
    # blocks: each is still its own score
    u = nplm.Model(str(path), normalization="unnormalized").core
    batch = u.log_probs(ctx, words)
    for i in range(0, n, 7):
        assert batch[i] == pytest.approx(u.log_probs(ctx[i:i + 1], words[i:i + 1])[0], abs=1e-6), i


@pytest.mark.parametrize("activation", ["tanh", "identity", "relu"])
def test_first_layer_table_with_every_activation(tmp_path, activation):
    """The first layer read from the precomputed table applies each activation (ReLU
    inside the summing kernel, tanh after it, identity not at all)."""
    from nplm.neural.network import NeuralConfig, NeuralNet
    from nplm.neural.vocab import Vocabulary

    from helpers import COUNTS, WORDS, randomise
    cfg = NeuralConfig(order=4, embedding_dim=8, hidden=(20, 6), context="full", output="softmax",
                       objective="mle", activation=activation)
    net = randomise(NeuralNet.create(cfg, Vocabulary(WORDS, COUNTS), seed=4), 4)
    path = tmp_path / "t.nplm"
    net.save(str(path))
    m = nplm.Model(str(path))
    for hist in (["w1", "w2", "w3"], ["w7"], []):
        s = _state_after(m, hist)
        np.testing.assert_allclose(m.log10_distribution(s).astype(np.float64),
                                   numpy_log_dist(net, _ctx(net, hist)) / LN10, atol=2e-5)


def test_cache_size_bounds_the_context_cache(tmp_path):
    """``cache_size`` sets how many contexts the single-query cache holds: with one slot
    two alternating contexts always miss, with many they hit after their first query;
    the scores are the same either way, and pickling keeps the size."""
    import pickle
    net = make_net("class-full-1")
    path = str(tmp_path / "c.nplm")
    net.save(path)
    small, big = nplm.Model(path, cache_size=1), nplm.Model(path, cache_size=1 << 16)
    assert (small.core.cache_size, big.core.cache_size) == (1, 1 << 16)
    assert nplm.Model(path).core.cache_size == 4096
    a, b = _state_after(small, ["w1"]), _state_after(small, ["w2"])
    got = {}
    for m in (small, big):
        m.core.clear_cache()
        m.core.cache_hits = m.core.cache_misses = 0
        out = nplm.State()
        got[id(m)] = [m.BaseScore(s, w, out) for _ in range(5) for w in ("w3", "w4") for s in (a, b)]
    assert got[id(small)] == got[id(big)]
    assert small.core.cache_hits == 0 and small.core.cache_misses == 20
    assert big.core.cache_misses == 2 and big.core.cache_hits == 18
    assert pickle.loads(pickle.dumps(small)).core.cache_size == 1
    for bad in (0, -3, 2.5, True, 2**31):
        with pytest.raises(ValueError, match="cache_size"):
            nplm.Model(path, cache_size=bad)


def test_cache_size_is_for_neural_models_only(tmp_path):
    p = tmp_path / "toy.arpa"
    p.write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-1.0\t<s>\t0\n-0.5\t</s>\n-0.5\ta\n\n\\end\\\n")
    with pytest.raises(nplm.ModelLoadError, match="cache_size applies to neural models only"):
        nplm.Model(str(p), cache_size=16)
