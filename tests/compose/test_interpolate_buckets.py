"""Linear mixtures whose weights depend on the context (``bucket_by``): scores against
a brute-force reference that rebuilds each context's bucket from the back-off
model's n-grams, normalisation, per-bucket tuning, the spec and the CLI."""
import json
import pickle

import numpy as np
import pytest

import nplm
from nplm.backoff.arpa import read_arpa
from nplm.cli.main import main as cli_main
from nplm.compose.interpolate import tune_linear

from helpers import DATA, REFERENCE, need_shared, quiet_config, read_lines

SENTENCES = ["the company said it expects to report a loss", "UNK shares rose N cents",
             "zzqx unknown words qqq", "", "of the new year the stock market fell sharply",
             "the stock market fell sharply in new york trading"]


_quiet = quiet_config


@pytest.fixture(scope="module")
def paths(reference_binaries):
    return reference_binaries


@pytest.fixture(scope="module")
def extendable():
    """The n-grams of ptb5k.o5 that KenLM keeps in a state: those that are the
    context of a longer n-gram or carry a non-zero back-off weight."""
    need_shared()
    t = read_arpa(str(REFERENCE / "ptb5k.o5.arpa.xz"))
    ext = set()
    for k in range(1, t.order):
        ext |= {tuple(r) for r in t.ids[k][:, :k].tolist()}
        ext |= {tuple(r) for r in t.ids[k - 1][t.backoff[k - 1] != 0].tolist()}
    bow = {tuple(r): float(b) for k in range(t.order) for r, b in zip(t.ids[k].tolist(), t.backoff[k])}
    return t.vocab, {g: bow[g] for g in ext}


@pytest.fixture(scope="module")
def dev():
    need_shared()
    return read_lines(DATA / "ptb" / "ptb.valid.txt", limit=300)


def _buckets(sentence, vocab, ext, order, bos=True, eos=True, edges=None):
    """Brute force: per token, the weight row of its context: the last row for <s>
    alone, else by the longest suffix of the context (at most order - 1 words) that
    the back-off model keeps, walking back until the first n-gram it lacks: its
    length L, and with ``edges`` the bin of its back-off weight."""
    bins = 1 if edges is None else len(edges[0]) + 1
    index = {w: i for i, w in enumerate(vocab)}
    ids = [index.get(w, 0) for w in sentence.split()] + ([index["</s>"]] if eos else [])
    hist = [index["<s>"]] if bos else []
    out = []
    for w in ids:
        if hist == [index["<s>"]]:
            out.append((order - 1) * bins + 1)
        else:
            length = 0
            for k in range(1, min(len(hist), order - 1) + 1):
                g = tuple(hist[-k:])
                if 0 in g:
                    break
                if g in ext:
                    length = k
            if length == 0:
                out.append(0)
            else:
                b = ext[tuple(hist[-length:])]
                j = 0 if edges is None else sum(e <= b for e in edges[length - 1])
                out.append(1 + (length - 1) * bins + j)
        hist.append(w)
    return out


def _split_scores(m, s, union, bos=True, eos=True):
    """A component's log10 p per token as a mixture with unknown="split" sees it: a
    word it lacks gets its <unk> probability divided among the k union words it lacks."""
    k = 1 + sum(1 for w in union[1:] if w not in m)
    return [p - (np.log10(k) if oov else 0.0) for p, _, oov in m.full_scores(s, bos, eos)]


def _mix(paths, rows=None, seed=3, **kw):
    comps = [paths["ptb5k.o5"], paths["wiki3k.o5"]]
    if rows is None:
        rows = np.random.default_rng(seed).dirichlet([1.0, 1.0], size=6)
    return nplm.interpolate(comps, rows, bucket_by=0, config=_quiet(), **kw), comps, rows


def test_scores_match_the_brute_force_buckets(paths, extendable):
    mix, comps, W = _mix(paths)
    models = [nplm.Model(c, _quiet()) for c in comps]
    union = mix.vocab.words()
    vocab, ext = extendable
    seen = set()
    for s in SENTENCES:
        for bos, eos in [(True, True), (False, True), (True, False)]:
            b = _buckets(s, vocab, ext, 5, bos, eos)
            seen.update(b)
            assert mix.context_buckets([s], bos, eos).tolist() == b
            per = np.array([_split_scores(m, s, union, bos, eos) for m in models])
            ref = np.log10((W[b].T * 10.0 ** per).sum(axis=0))
            np.testing.assert_allclose([p for p, _, _ in mix.full_scores(s, bos, eos)], ref, atol=2e-5)
            assert mix.score(s, bos, eos) == pytest.approx(float(ref.sum()), abs=1e-4)
    assert len(seen) >= 5          # the sentences reach most rows, so a wrong row would show


def test_a_kenlm_model_component_buckets_by_kenlms_own_state(paths, extendable, dev, tmp_path):
    # The same ARPA as a kenlm.Model and as an nplm binary: the same rows (those of
    # the brute force, which walks the ARPA's n-grams), scores, tuned weights, and a
    # saved spec reloads as the same model.
    kenlm = pytest.importorskip("kenlm")
    cfg = kenlm.Config()
    cfg.show_progress = False
    cfg.arpa_complain = kenlm.ARPALoadComplain.NONE
    km = kenlm.Model(str(REFERENCE / "ptb5k.o5.arpa.xz"), cfg)
    vocab, ext = extendable
    words = nplm.Model(paths["ptb5k.o5"], _quiet()).vocab.words()
    rows = np.random.default_rng(5).dirichlet([1.0, 1.0], size=6)
    a = nplm.interpolate([km, paths["wiki3k.o5"]], rows, bucket_by=0, vocab=words, config=_quiet())
    b = nplm.interpolate([paths["ptb5k.o5"], paths["wiki3k.o5"]], rows, bucket_by=0, config=_quiet())
    assert sorted(a.vocab.words()) == sorted(b.vocab.words())
    lines = SENTENCES + ["the company said it expects zzqx to report a loss"] + dev[:40]
    for s in lines:
        for bos, eos in [(True, True), (False, True)]:
            got = a.context_buckets([s], bos, eos).tolist()
            assert got == b.context_buckets([s], bos, eos).tolist() == _buckets(s, vocab, ext, 5, bos, eos)
            np.testing.assert_allclose([p for p, _, _ in a.full_scores(s, bos, eos)],
                                       [p for p, _, _ in b.full_scores(s, bos, eos)], atol=1e-5)
    ra, rb = a.tune(dev[:150]), b.tune(dev[:150])
    np.testing.assert_allclose(ra.weights, rb.weights, atol=1e-6)
    a.save(str(tmp_path / "a.json"))
    loaded = nplm.Model(str(tmp_path / "a.json"), _quiet())
    for s in lines:
        assert loaded.score(s) == pytest.approx(a.score(s), abs=1e-4)


def test_back_off_bins_match_the_brute_force_buckets(paths, extendable, dev):
    comps = [paths["ptb5k.o5"], paths["wiki3k.o5"]]
    mix = nplm.interpolate(comps, bucket_by=0, bucket_bins=3, config=_quiet())
    assert mix.weights.shape == (4 * 3 + 2, 2)
    mix.tune(dev)
    edges = mix.bucket_edges
    assert edges.shape == (4, 2) and np.all(np.diff(edges, axis=1) >= 0)
    W = mix.weights
    models = [nplm.Model(c, _quiet()) for c in comps]
    union = mix.vocab.words()
    vocab, ext = extendable
    seen = set()
    for s in SENTENCES + dev[:20]:
        b = _buckets(s, vocab, ext, 5, edges=edges.tolist())
        seen.update(b)
        assert mix.context_buckets([s]).tolist() == b
        per = np.array([_split_scores(m, s, union) for m in models])
        np.testing.assert_allclose([p for p, _, _ in mix.full_scores(s)],
                                   np.log10((W[b].T * 10.0 ** per).sum(axis=0)), atol=2e-5)
    assert len(seen) >= 8
    # the edges sit at the dev tokens' terciles within each context length (back-off
    # weights repeat, so the thirds are only roughly equal)
    b = mix.context_buckets(dev)
    for L in range(1, 5):
        counts = np.bincount(b[(b >= 1 + (L - 1) * 3) & (b < 1 + L * 3)] - (1 + (L - 1) * 3), minlength=3)
        assert counts.min() > 0
        # below the k-th tercile lie at most k/3 of them, ties or not
        assert np.all(np.cumsum(counts)[:2] <= (np.arange(1, 3) / 3 + 0.01) * counts.sum())
    # a spec keeps the edges
    flat = nplm.interpolate(comps, W, bucket_by=0, bucket_edges=edges, config=_quiet())
    assert flat.score(dev[0]) == mix.score(dev[0])


def test_back_off_bins_need_a_back_off_model(paths, tmp_path):
    ctx = [paths["ptb5k.o5"], paths["wiki3k.o5"]]
    with pytest.raises(ValueError, match="bucket_bins=9"):
        nplm.interpolate(ctx, bucket_by=0, bucket_bins=9)
    with pytest.raises(ValueError, match="need bucket_by"):
        nplm.interpolate(ctx, bucket_bins=2)
    with pytest.raises(ValueError, match="bucket_edges of shape"):
        nplm.interpolate(ctx, bucket_by=0, bucket_edges=[[0.0]] * 3)


def test_every_bucket_is_a_normalised_distribution(paths):
    mix = nplm.interpolate([paths["ptb5k.o5"], paths["ptb5k.o3"]],
                           np.random.default_rng(5).dirichlet([1.0, 1.0], size=6), bucket_by=0)
    seen = set()
    for words, bos in [([], True), (["the"], True), (["the", "company", "said"], True),
                       (["of", "the", "new", "year"], True), (["zzqx"], True), ([], False)]:
        s, o = nplm.State(), nplm.State()
        (mix.BeginSentenceWrite if bos else mix.NullContextWrite)(s)
        for w in words:
            mix.BaseScore(s, w, o)
            s, o = o, s
        d = mix.log10_distribution(s).astype(np.float64)
        d[mix.vocab.id("<s>")] = -np.inf
        assert float((10.0 ** d).sum()) == pytest.approx(1.0, abs=1e-4)
        seen.add(int(mix.context_buckets([" ".join(words + ["x"])], bos, False)[-1]))
    assert len(seen) >= 4


def test_tuning_per_bucket(paths, dev):
    mix, _, _ = _mix(paths)
    flat = nplm.interpolate([paths["ptb5k.o5"], paths["wiki3k.o5"]], config=_quiet())
    flat_res = flat.tune(dev)
    res = mix.tune(dev)
    W = mix.weights
    assert W.shape == (6, 2) and np.allclose(W.sum(axis=1), 1.0)
    probs, _, _, _ = mix.full_scores_batch(dev)
    assert 10.0 ** (-probs.astype(np.float64).mean()) == pytest.approx(res.perplexity, rel=1e-5)
    # the flat weights are one choice of the rows: tuning per bucket can only do better
    assert res.perplexity < flat_res.perplexity
    b = mix.context_buckets(dev)
    lp = mix.component_scores(dev)
    for k in range(6):
        sel = b == k
        if not sel.any():        # a row no dev token reaches keeps the flat weights
            np.testing.assert_allclose(W[k], flat_res.weights, atol=1e-4)
            continue
        # each reached row is EM's optimum on its tokens, up to the prior's pull
        alone = tune_linear(lp[:, sel]).weights
        assert abs(W[k, 0] - alone[0]) <= abs(flat_res.weights[0] - alone[0]) + 1e-6
    assert np.ptp(W[np.unique(b)][:, 0]) > 0.02     # the rows really differ


def test_favour_moves_every_row_towards_one_model(paths):
    mix, _, W = _mix(paths)
    mix.favour(0, 0.25)
    np.testing.assert_allclose(mix.weights, 0.75 * W + 0.25 * np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="outside"):
        mix.favour(0, 1.5)
    with pytest.raises(ValueError, match="no model 2"):
        mix.favour(2, 0.1)


def test_spec_round_trip_and_pickle(paths, tmp_path):
    mix, _, W = _mix(paths)
    spec = tmp_path / "b.json"
    mix.save(str(spec))
    data = json.loads(spec.read_text())
    assert data["version"] == 2 and data["bucket_by"] == 0 and "bucket_edges" not in data
    np.testing.assert_allclose(data["weights"], W)
    loaded = nplm.Model(str(spec), _quiet())
    again = pickle.loads(pickle.dumps(mix))
    for s in SENTENCES:
        assert list(loaded.full_scores(s)) == list(mix.full_scores(s))
        assert again.score(s) == mix.score(s)
    assert "bucketed by model 0" in repr(mix)


def test_argument_errors(paths):
    comps = [paths["ptb5k.o5"], paths["wiki3k.o5"]]
    with pytest.raises(ValueError, match="mode='linear'"):
        nplm.interpolate(comps, [0.5, 0.5], "loglinear", bucket_by=0)
    with pytest.raises(ValueError, match="index of a model"):
        nplm.interpolate(comps, [0.5, 0.5], bucket_by=2)
    with pytest.raises(ValueError, match="6 rows"):
        nplm.interpolate(comps, [[0.5, 0.5]] * 4, bucket_by=0)
    with pytest.raises(ValueError, match="bucket 2: linear weights must sum to 1"):
        nplm.interpolate(comps, [[0.5, 0.5]] * 2 + [[0.9, 0.9]] + [[0.5, 0.5]] * 3, bucket_by=0)
    # a flat vector serves every bucket
    mix = nplm.interpolate(comps, [0.3, 0.7], bucket_by=0)
    np.testing.assert_allclose(mix.weights, [[0.3, 0.7]] * 6)
    flat = nplm.interpolate(comps, [0.3, 0.7])
    assert mix.score(SENTENCES[0]) == pytest.approx(flat.score(SENTENCES[0]), abs=1e-5)


@pytest.mark.parametrize("body,needle", [
    ('"version": 2, "weights": [[1]]', '"bucket_by" is missing: spec version 2'),
    ('"version": 2, "weights": [1]', '"bucket_by" is missing: spec version 2'),
    ('"version": 2, "bucket_by": null, "weights": [[1]]', '"bucket_by" is missing'),
    ('"version": 1, "bucket_by": 0, "weights": [1]', "version 2"),
    ('"version": 2, "bucket_by": 0, "weights": [1]', "rows"),
    ('"version": 2, "bucket_by": 3, "weights": [[1]]', '"bucket_by" must be the index of a model (0..0)'),
    ('"version": 2, "bucket_by": 0, "weights": [[1]], "bucket_edges": [[0], []]', "bucket_edges"),
    ('"version": 1, "weights": [1], "bucket_edges": [[0]]', "version 2"),
])
def test_bad_bucketed_specs_name_the_file(tmp_path, paths, body, needle):
    spec = tmp_path / "bad.json"
    spec.write_text('{"nplm": "interpolation", "mode": "linear", "models": ["%s"], %s}'
                    % (paths["ptb5k.o3"], body))
    with pytest.raises(nplm.ModelLoadError) as e:
        nplm.Model(str(spec), _quiet())
    assert "bad.json" in str(e.value) and needle in str(e.value)


def test_cli_bucket_by_and_favour(paths, tmp_path, dev, capsys):
    text = tmp_path / "dev.txt"
    text.write_text("\n".join(dev[:150]) + "\n")
    out = tmp_path / "t.json"
    a, b = paths["ptb5k.o5"], paths["wiki3k.o5"]
    assert cli_main(["interpolate", "--model", a, "--model", b, "--bucket-by", "0", "--tune", str(text),
                     "--favour", "0", "0.3", "--out", str(out)]) == 0
    assert "dev perplexity" in capsys.readouterr().err
    spec = json.loads(out.read_text())
    tuned = nplm.interpolate([a, b], bucket_by=0, config=_quiet())
    tuned.tune(str(text))
    np.testing.assert_allclose(spec["weights"], 0.7 * tuned.weights + 0.3 * np.array([1.0, 0.0]), atol=1e-9)
    assert spec["favoured"] == {"model": 0, "fraction": 0.3} and spec["bucket_by"] == 0
    assert cli_main(["interpolate", "--model", a, "--model", b, "--favour", "x", "0.3", "--out", str(out)]) == 1
    assert cli_main(["interpolate", "--model", a, "--model", b, "--bucket-by", "0", "--bucket-bins", "2",
                     "--out", str(out)]) == 1
    assert "needs --tune" in capsys.readouterr().err
    assert cli_main(["interpolate", "--model", a, "--model", b, "--bucket-by", "0", "--bucket-bins", "2",
                     "--tune", str(text), "--out", str(out)]) == 0
    spec = json.loads(out.read_text())
    assert np.shape(spec["weights"]) == (4 * 2 + 2, 2) and np.shape(spec["bucket_edges"]) == (4, 1)
    m = nplm.Model(str(out), _quiet())
    probs, _, _, _ = m.full_scores_batch(dev[:150])
    assert 10.0 ** (-probs.astype(np.float64).mean()) == pytest.approx(spec["dev_perplexity"], rel=1e-5)


def test_a_bucketed_teacher_distils_to_its_own_probabilities(tmp_path):
    """distil scores its n-grams through the mixture's core (score_rows), the kenlm
    API through BaseScore: both must pick the same weight row."""
    need_shared()
    from nplm.compose import distil
    lines = (REFERENCE / "tiny200.txt").read_text().splitlines()
    text = tmp_path / "train.txt"
    text.write_text("\n".join(lines[:150]) + "\n")
    o2 = tmp_path / "o2.arpa"
    nplm.estimate(str(text), 2, arpa=str(o2), discount_fallback=True)
    kn4 = str(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz")
    mix = nplm.interpolate([kn4, str(o2)], np.random.default_rng(2).dirichlet([1.0, 1.0], size=3 * 2 + 2),
                           bucket_by=0, bucket_bins=2, bucket_edges=[[-0.3]] * 3, config=_quiet())
    tables = distil.distil(mix, 3, str(text))
    rows_seen = set()
    for k in (1, 2):
        for row, lp in zip(tables.ids[k].tolist(), tables.logprob[k].tolist()):
            words = [tables.vocab[i] for i in row]
            s, t = nplm.State(), nplm.State()
            (mix.BeginSentenceWrite if words[0] == "<s>" else mix.NullContextWrite)(s)
            for w in words[1:-1] if words[0] == "<s>" else words[:-1]:
                mix.BaseScore(s, w, t)
                s, t = t, s
            assert mix.BaseScore(s, words[-1], t) == pytest.approx(lp, abs=1e-5), words
            rows_seen.add(int(mix.context_buckets([" ".join(words[1:] if words[0] == "<s>" else words)],
                                                  words[0] == "<s>", False)[-1]))
    assert len(rows_seen) >= 4
