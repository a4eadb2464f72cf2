"""Sampling from neural models: the draws follow the network's exact distribution
(first words and word pairs against numpy's forward pass), for every output kind;
seeded runs repeat; the CLI writes a text that distil can list."""
import numpy as np
import pytest

from nplm.neural import query as neural_model
from nplm.neural import sample
from nplm.neural.vocab import BOS, EOS, NULL

from helpers import make_net, numpy_log_dist


def _load(tmp_path, kind, order=3):
    net = make_net(kind, order=order, seed=5)
    path = tmp_path / f"{kind}.nplm"
    net.save(path)
    return net, path, neural_model.load(str(path))


def _draws(data, n, seed=0):
    """(first word, second word or </s>) of n sampled sentences, as ids."""
    ids = data.net.vocab.index
    out = []
    for s in sample.sample_sentences(data, 10 ** 9, seed=seed, streams=2048, max_len=2):
        w = [ids[t] for t in s] + [EOS]
        out.append((w[0], w[1] if len(w) > 1 else EOS))
        if len(out) == n:
            break
    return np.array(out)


def _expected_first(net):
    m = net.order - 1
    start = [NULL] * (m - 1) + [BOS]
    p = np.exp(numpy_log_dist(net, start))
    p[[BOS, NULL]] = 0          # redrawn: the sample is conditioned on a real word
    return p / p.sum(), start


@pytest.mark.parametrize("kind", ["class-full-1", "class-diag-2", "softmax-diag-0", "tree-full-1"])
def test_draws_follow_the_exact_distribution(tmp_path, kind):
    """class-full-1 (ReLU) draws in the query core, class-diag-2 by Gumbel-max."""
    net, _, data = _load(tmp_path, kind)
    n = 40000
    d = _draws(data, n)
    p, start = _expected_first(net)
    freq = np.bincount(d[:, 0], minlength=len(p)) / n
    # every word within 4.5 standard errors (a binomial count per word)
    se = np.sqrt(p * (1 - p) / n) + 1e-12
    assert np.all(np.abs(freq - p) <= 4.5 * se + 1e-9), np.max(np.abs(freq - p) / se)
    assert freq[BOS] == 0 and freq[NULL] == 0
    # the second word follows p(. | start shifted by the first word): checks the
    # context each stream carries forward
    w1 = int(np.argmax(p))
    rows = d[d[:, 0] == w1, 1]
    q = np.exp(numpy_log_dist(net, start[1:] + [w1]))
    q[[BOS, NULL]] = 0
    q /= q.sum()
    f2 = np.bincount(rows, minlength=len(q)) / len(rows)
    se2 = np.sqrt(q * (1 - q) / len(rows)) + 1e-12
    assert np.all(np.abs(f2 - q) <= 4.5 * se2 + 1e-9), np.max(np.abs(f2 - q) / se2)


@pytest.mark.parametrize("kind", ["softmax-diag-0", "tree-full-1"])
def test_full_draws_need_little_beyond_the_distribution(tmp_path, kind):
    """A softmax or tree draw holds the (streams x V) distribution and little more:
    Gumbel-max added a float64 Gumbel per word and two more float32 copies (1.9 GB
    and 80% of the time sampling a 33k-word WikiText-2 model)."""
    import tracemalloc
    net, _, data = _load(tmp_path, kind)
    ctx = np.tile(np.array([NULL, BOS], np.int32), (8192, 1))
    size = ctx.shape[0] * len(net.vocab) * 4
    tracemalloc.start()
    try:
        w = sample._full_draw(net, ctx, np.random.default_rng(1))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * size, peak / size
    assert w.shape == (8192,) and w.min() >= 0 and w.max() < len(net.vocab)


@pytest.mark.parametrize("kind", ["class-diag-2", "class-full-1"])
def test_seeded_sampling_repeats_and_counts_tokens(tmp_path, kind):
    _, path, data = _load(tmp_path, kind)
    a = list(sample.sample_sentences(data, 3000, seed=4, streams=64))
    b = list(sample.sample_sentences(data, 3000, seed=4, streams=64))
    c = list(sample.sample_sentences(data, 3000, seed=5, streams=64))
    assert a == b and a != c
    tokens = sum(len(s) + 1 for s in a)
    assert tokens >= 3000
    # the sentences in flight at the target are finished: at most one per stream past it
    assert tokens - (len(a[-1]) + 1) < 3000 + 64 * 101
    vocab = set(data.net.vocab.words)
    assert all(w in vocab and w not in ("<s>", "</s>", "<null>") for s in a for w in s)
    # max_len cuts sentences
    assert max(len(s) for s in sample.sample_sentences(data, 2000, max_len=3, streams=16)) <= 3


def test_core_draws_invert_the_cumulative_distribution(tmp_path):
    """u = 0 draws the first class and its first word; u just below 1 the last ones;
    u in between the index where the cumulative probability passes u (brute force)."""
    net, _, data = _load(tmp_path, "class-full-1")
    core, st = data.core, net.structs
    assert core.samples_classes
    start = [NULL] * (net.order - 2) + [BOS]
    ctx = np.array([start] * 3, np.int32)
    u = np.array([[0.0, 0.0], [1 - 1e-12, 1 - 1e-12], [0.37, 0.61]])
    rows = core.sample_class_rows(ctx, u)
    cs = st["class_start"]
    assert rows[0] == cs[0] and rows[1] == cs[-1] - 1
    lp = numpy_log_dist(net, start)                  # by word id
    words = st["class_words"]
    pc = np.array([np.exp(lp[words[cs[k]:cs[k + 1]]]).sum() for k in range(len(cs) - 1)])
    k = int(np.searchsorted(np.cumsum(pc), 0.37, side="right"))
    pw = np.exp(lp[words[cs[k]:cs[k + 1]]])
    j = int(np.searchsorted(np.cumsum(pw / pw.sum()), 0.61, side="right"))
    assert rows[2] == cs[k] + j
    with pytest.raises(ValueError):
        core.sample_class_rows(ctx, u[:2])


def test_cli_sample_and_distil_lists_the_sample(tmp_path, capsys):
    from nplm.cli.main import main
    from nplm.compose import distil
    _, path, data = _load(tmp_path, "class-full-1")
    out = tmp_path / "s.txt"
    assert main(["sample", str(path), "--tokens", "5000", "--out", str(out), "--seed", "3", "-q"]) == 0
    assert "sentences" in capsys.readouterr().err
    lines = out.read_text().splitlines()
    assert sum(len(l.split()) + 1 for l in lines) >= 5000
    # the same seed through the API gives the same text
    again = tmp_path / "t.txt"
    sample.sample_to_file(str(path), again, 5000, seed=3, progress=False)
    assert again.read_bytes() == out.read_bytes()
    # every sampled trigram (count >= 1) is listed by distil --sample-text
    tables = distil.distil(str(path), 3, sample_text=str(out))
    listed = {tuple(tables.vocab[i] for i in r) for r in tables.ids[2].tolist()}
    for line in lines[:200]:
        w = ["<s>"] + line.split() + ["</s>"]
        for i in range(len(w) - 2):
            assert tuple(w[i:i + 3]) in listed
    # thresholds apply to the sample's counts
    fewer = distil.distil(str(path), 3, sample_text=str(out), sample_min_count=[1, 3])
    assert fewer.counts[2] < tables.counts[2]
    # the CLI passes the sample, its thresholds and the continuation orders through
    arpa = tmp_path / "s.arpa"
    assert main(["distil", str(path), "--sample-text", str(out), "--sample-min-count", "1", "3",
                 "--order", "3", "--arpa", str(arpa), "--continuation", "1", "-q"]) == 0
    want = distil.distil(str(path), 3, sample_text=str(out), sample_min_count=[1, 3], continuation=1)
    from nplm.backoff.arpa import read_arpa
    got = read_arpa(arpa)
    assert got.counts == want.counts
    assert np.allclose(got.logprob[0], want.logprob[0], atol=1e-4)
    assert not np.allclose(got.logprob[0], fewer.logprob[0], atol=1e-3)


def test_bad_input(tmp_path):
    from nplm.cli.main import main
    _, path, data = _load(tmp_path, "class-full-1")
    with pytest.raises(ValueError, match="positive"):
        next(sample.sample_sentences(data, 0))
    before = path.read_bytes()
    assert main(["sample", str(path), "--tokens", "10", "--out", str(path), "-q"]) == 1
    assert path.read_bytes() == before
    arpa = tmp_path / "x.arpa"
    arpa.write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-1\t<s>\n-0.5\t</s>\n-0.5\ta\n\n\\end\\\n")
    assert main(["sample", str(arpa), "--tokens", "10", "--out", str(tmp_path / "o.txt"), "-q"]) == 1
    assert not (tmp_path / "o.txt").exists()


def _exact_words_per_sentence(net, max_len):
    """P(k words), k = 0..max_len, of a sampled sentence (max_len: cut there), summed
    exactly over every context of an order-3 net: P(k words) = the mass still in flight after k - 1 words
    times p(</s> | context), with <s>/<null> draws redrawn (renormalised away)."""
    assert net.order == 3
    V = len(net.vocab)
    Q = np.empty((V, V, V))
    for a in range(V):
        for b in range(V):
            q = np.exp(numpy_log_dist(net, [a, b]))
            q[[BOS, NULL]] = 0
            Q[a, b] = q / q.sum()
    real = np.ones(V, bool)
    real[[BOS, NULL, EOS]] = False
    mass = np.zeros((V, V))
    mass[NULL, BOS] = 1.0
    p_words = []
    for _k in range(max_len):
        p_words.append((mass * Q[:, :, EOS]).sum())
        nxt = np.einsum("ab,abw->bw", mass, Q)
        nxt[:, ~real] = 0
        mass = nxt
    p_words.append(mass.sum())                     # cut at max_len words
    p = np.array(p_words)
    assert abs(p.sum() - 1) < 1e-9
    return p


@pytest.mark.parametrize("kind", ["class-full-1", "softmax-diag-0"])
def test_sentence_lengths_do_not_depend_on_the_budget(tmp_path, kind):
    """Sentences are started while the budget lasts and all of them finished, so each
    is a draw from the model and (Wald's identity) tokens per sentence, pooled over
    runs, estimate the exact mean at a budget of a few sentences per stream as at a
    large one; the first lines are draws like any other, not the ones that ended first.
    Tolerances: 4.5 standard errors, sigma / sqrt(sentences), from the exact sd."""
    net, _, data = _load(tmp_path, kind, order=3)
    max_len = 20
    p = _exact_words_per_sentence(net, max_len)
    tokens = np.arange(max_len + 1) + 1            # words plus </s> (a cut one counts it too)
    mu = (p * tokens).sum()
    sd = np.sqrt((p * (tokens - mu) ** 2).sum())
    streams = 256
    small = [list(sample.sample_sentences(data, 600, seed=s, streams=streams, max_len=max_len))
             for s in range(40)]
    large = list(sample.sample_sentences(data, 60000, seed=99, streams=streams, max_len=max_len))
    for runs in (small, [large]):
        lens = np.array([len(s) + 1 for run in runs for s in run])
        assert all(sum(len(s) + 1 for s in run) >= (600 if runs is small else 60000) for run in runs)
        assert abs(lens.mean() - mu) <= 4.5 * sd / np.sqrt(len(lens)), (lens.mean(), mu, len(lens))
    first = np.array([len(s) + 1 for run in small for s in run[:10]])
    assert abs(first.mean() - mu) <= 4.5 * sd / np.sqrt(len(first)), (first.mean(), mu)
    # the whole length distribution of the large sample, cuts at max_len included
    freq = np.bincount([len(s) for s in large], minlength=max_len + 1) / len(large)
    se = np.sqrt(p * (1 - p) / len(large))
    assert np.all(np.abs(freq - p) <= 4.5 * se + 1e-12), np.max(np.abs(freq - p) / se)


@pytest.mark.parametrize("kind", ["class-full-1", "tree-full-1"])
def test_small_budget_overshoot(tmp_path, kind):
    """At a small budget the text overshoots by about the sentences in flight at the
    end, which are never more than have finished: over seeds, the mean overshoot stays
    under two mean sentences (an estimate of the length from the first, short,
    sentences used to start several times too many: 100 tokens gave 292)."""
    net, _, data = _load(tmp_path, kind, order=3)
    max_len = 100
    p = _exact_words_per_sentence(net, max_len)
    mu = (p * (np.arange(max_len + 1) + 1)).sum()
    for budget in (int(2 * mu), int(6 * mu)):
        totals = np.array([sum(len(s) + 1 for s in sample.sample_sentences(data, budget, seed=s,
                                                                            max_len=max_len))
                           for s in range(60)])
        assert totals.min() >= budget
        assert totals.mean() - budget <= 2 * mu, (budget, mu, totals.mean())
