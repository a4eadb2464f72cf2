"""``nplm distil``'s defaults on a small corpus: a Kneser-Ney model mixed with a quickly
trained network, distilled with the defaults, is no worse than the Kneser-Ney model
on held-out text; a deliberately bad option set that makes the table worse is
reported loudly; every table loads in the real kenlm with kenlm's scores equal to
nplm's and every context's distribution summing to one."""
import warnings

import numpy as np
import pytest

import nplm
from nplm.backoff import arpa
from nplm.compose import distil_auto
from nplm.compose.interpolate import interpolate
from nplm.neural.network import NeuralConfig
from nplm.neural.train import TrainConfig, train

from helpers import REFERENCE, need_shared, quiet_config

kenlm = pytest.importorskip("kenlm")

ORDER = 4
POOL = 150_000          # sampled tokens (the time budget would choose more; CI keeps it small)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """ptb5k split 4500 / 250 / 250 lines; a KN model of the training part, a small
    network trained for a few epochs with variable history (the recipe's kind), and
    their mixture tuned on the validation part."""
    need_shared()
    d = tmp_path_factory.mktemp("defaults")
    lines = (REFERENCE / "ptb5k.txt").read_text().splitlines()
    parts = {"train": lines[:4500], "valid": lines[4500:4750], "test": lines[4750:]}
    for name, part in parts.items():
        (d / f"{name}.txt").write_text("\n".join(part) + "\n")
    kn = d / "kn.arpa"
    nplm.estimate(str(d / "train.txt"), order=ORDER, arpa=str(kn))
    net = d / "net.nplm"
    train(str(d / "train.txt"), str(d / "valid.txt"), str(net),
          NeuralConfig(order=ORDER, embedding_dim=64, variable_history=True),
          TrainConfig(epochs=4, threads=1, seed=3),
          log=lambda s: None, progress=False)
    mix = interpolate([str(kn), str(net)])
    mix.tune(str(d / "valid.txt"))
    spec = d / "mix.json"
    mix.save(str(spec), tuned_on=str(d / "valid.txt"))
    return d, kn, net, spec


def _kenlm_ppl(path, lines):
    m = kenlm.Model(str(path))
    total = sum(m.score(line) for line in lines)
    return 10.0 ** (-total / sum(len(line.split()) + 1 for line in lines))


@pytest.fixture(scope="module")
def default_table(corpus):
    d, kn, net, spec = corpus
    out = d / "default.arpa"
    with warnings.catch_warnings():
        warnings.simplefilter("error", distil_auto.DistilQualityWarning)
        tables, report, plan = distil_auto.distil_auto_to_file(str(spec), str(out), ORDER, str(d / "train.txt"),
                                                               sample_tokens=POOL)
    return tables, report, plan, out


def test_default_plan_carries_the_recipe(corpus, default_table):
    d, kn, net, spec = corpus
    tables, report, plan, out = default_table
    cfg = plan.config
    assert cfg.lower_teacher is None                   # the network has variable history
    assert cfg.continuation == 1 and cfg.sample_tokens == POOL and cfg.sample_models == (str(net),)
    assert cfg.prune_to == sum(arpa.read_arpa(kn).counts[1:])
    assert plan.teacher.bucket_by == 0                 # weights per KN context bucket
    assert sum(tables.counts[1:]) <= cfg.prune_to


def test_default_distil_of_a_mixture_is_no_worse_than_kn_on_held_out_text(corpus, default_table):
    d, kn, net, spec = corpus
    tables, report, plan, out = default_table
    test = (d / "test.txt").read_text().splitlines()    # used by nothing above
    assert _kenlm_ppl(out, test) <= _kenlm_ppl(kn, test)
    # the report: the validation text the mixture was tuned on, the table beside KN
    assert report is not None and not report.worse
    assert report.backoff == pytest.approx(_kenlm_ppl(kn, (d / "valid.txt").read_text().splitlines()), rel=1e-5)
    assert report.table == pytest.approx(_kenlm_ppl(out, (d / "valid.txt").read_text().splitlines()), rel=1e-5)


def test_counting_in_a_tiny_memory_budget_gives_the_same_table(corpus, default_table, tmp_path):
    """``-S`` so small that counting the text and the sampled pool spills a run per chunk
    and sums the runs in parts gives the in-memory run's table, byte for byte (the same
    pool: the same seed); the spilled runs and the pool leave nothing in ``-T``."""
    from nplm.cli.main import main
    d, kn, net, spec = corpus
    tables, report, plan, out = default_table
    temp = tmp_path / "temp"
    temp.mkdir()
    spilled = tmp_path / "spilled.arpa"
    rc = main(["distil", str(spec), "--text", str(d / "train.txt"), "--order", str(ORDER), "--arpa", str(spilled),
               "--sample-tokens", str(POOL), "-S", "1K", "-T", str(temp), "-q"])
    assert rc == 0
    assert spilled.read_bytes() == out.read_bytes()
    assert list(temp.iterdir()) == []
    assert plan.config.count_memory == 4 << 30         # the default quality's --memory


def test_a_bad_option_set_is_reported_loudly(corpus, capsys):
    """A table pruned to a tenth of KN's size, from the flat teacher as it is, is worse
    than KN: the CLI says so and names the fixes."""
    from nplm.cli.main import main
    d, kn, net, spec = corpus
    out = d / "bad.arpa"
    small = sum(arpa.read_arpa(kn).counts[1:]) // 10
    rc = main(["distil", str(spec), "--text", str(d / "train.txt"), "--order", str(ORDER), "--arpa", str(out),
               "--quality", "fast", "--target-size", str(small), "--no-buckets", "--no-favour", "-q"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "WORSE than its back-off input" in err and "WARNING" in err
    assert "--target-size" in err and "--quality default or best" in err
    test = (d / "test.txt").read_text().splitlines()
    assert _kenlm_ppl(out, test) > _kenlm_ppl(kn, test)
    _check_loads_in_kenlm(out, test)


def test_fast_quality_is_no_worse_than_kn(corpus):
    d, kn, net, spec = corpus
    out = d / "fast.arpa"
    with warnings.catch_warnings():
        warnings.simplefilter("error", distil_auto.DistilQualityWarning)
        tables, report, plan = distil_auto.distil_auto_to_file(str(spec), str(out), ORDER, str(d / "train.txt"),
                                                               quality="fast")
    assert plan.config.sample_tokens == 0 and not report.worse
    test = (d / "test.txt").read_text().splitlines()
    assert _kenlm_ppl(out, test) <= _kenlm_ppl(kn, test) * 1.002
    _check_loads_in_kenlm(out, test)


def test_default_table_loads_in_kenlm_and_sums_to_one(corpus, default_table):
    d, kn, net, spec = corpus
    tables, report, plan, out = default_table
    _check_loads_in_kenlm(out, (d / "test.txt").read_text().splitlines())


def _check_loads_in_kenlm(path, lines, n_contexts=200, n_kenlm=8):
    """kenlm's scores of ``lines`` equal nplm's; sampled contexts (every listed one
    of a random sample) sum to one over the vocabulary minus <s>, in nplm for all of
    them and in the real kenlm for a few."""
    km, nm = kenlm.Model(str(path)), nplm.Model(str(path), quiet_config())
    for line in lines[:60]:
        for (pk, lk, ok), (pn, ln_, on) in zip(km.full_scores(line), nm.full_scores(line)):
            assert abs(pk - pn) <= 1e-5 and lk == ln_ and ok == on
    t = arpa.read_arpa(path)
    words = [w for w in t.vocab if w != "<s>"]
    ids = np.array([nm.vocab.id(w) for w in words])
    rng = np.random.default_rng(0)
    contexts = [()]
    for k in range(t.order - 1):
        rows = t.ids[k][rng.choice(t.counts[k], size=min(n_contexts // (t.order - 1), t.counts[k]), replace=False)]
        contexts += [tuple(t.vocab[i] for i in r) for r in rows if t.vocab[r[-1]] != "</s>"]
    for n, ctx in enumerate(contexts):
        dist = nm.log10_distribution(nm.core.state_for([nm.vocab.id(w) for w in ctx]))[ids]
        assert abs(np.sum(10.0 ** dist.astype(np.float64)) - 1.0) <= 1e-5, ctx
        if n % (len(contexts) // n_kenlm + 1) == 0:
            s, o = kenlm.State(), kenlm.State()
            if ctx and ctx[0] == "<s>":
                km.BeginSentenceWrite(s)
                ctx = ctx[1:]
            else:
                km.NullContextWrite(s)
            for w in ctx:
                km.BaseScore(s, w, o)
                s, o = o, s
            assert abs(sum(10.0 ** km.BaseScore(s, w, o) for w in words) - 1.0) <= 1e-5


def test_budgets_parse_and_bound_the_pool():
    assert distil_auto.parse_duration("20m") == 1200 and distil_auto.parse_duration("1.5h") == 5400
    assert distil_auto.parse_duration("90") == 90
    assert distil_auto.parse_size("4G") == 4 << 30 and distil_auto.parse_size("512M") == 512 << 20
    for bad in ("20 minutes", "-1m", ""):
        with pytest.raises(ValueError, match="time budget"):
            distil_auto.parse_duration(bad)
    with pytest.raises(ValueError, match="memory size"):
        distil_auto.parse_size("4 gigs")
    # memory: what is left above the resident set, at the bytes per sampled token
    per = distil_auto.BYTES_PER_SAMPLED_TOKEN
    assert distil_auto.pool_tokens(1000 * per + 500, rss=500) == 1000
    assert distil_auto.pool_tokens(10 * per, rss=20 * per) == 0 and distil_auto.pool_tokens(None) >= 1 << 62


def test_the_pool_clock_keeps_the_projected_end_within_the_budget():
    """Another piece is drawn while now + its sampling + the work after sampling of
    every token drawn + the fixed work ends before the deadline; before the first
    piece at the probe's rate, then at the rate measured so far."""
    import time
    W = distil_auto.WORK_AFTER_SAMPLING
    now = time.perf_counter()
    clock = distil_auto.PoolClock(now + 100.0, rate=1000.0, fixed_s=10.0)
    assert clock(0, 0.0, int(80 / (1 + W) * 1000)) and clock.drawn == int(80 / (1 + W) * 1000)
    assert not clock(0, 0.0, int(95 / (1 + W) * 1000)) and clock.drawn == 0
    # 10k tokens took 20 s (500/s): 10k more need 20 s + 20k * W / 500 s + 10 s
    assert clock(10_000, 20.0, 10_000) == (time.perf_counter() + 30 + 40 * W <= now + 100)
    assert not clock(10_000, 20.0, 40_000) and clock.drawn == 10_000


def test_a_pool_drawn_in_pieces_stops_when_the_clock_says_so(corpus, tmp_path):
    """sample_pool draws pieces from the network furthest below its share, with their
    own seeds, and stops at the first piece the clock refuses."""
    from nplm.compose.distil import POOL_PIECES, DistilConfig, sample_pool
    d, kn, net, spec = corpus
    asked = []

    def more(drawn, seconds, piece):
        asked.append((drawn, piece))
        return len(asked) <= 3
    cfg = DistilConfig(order=3, sample_tokens=16_000, sample_models=(str(net), str(net)), sample_more=more)
    paths = sample_pool(cfg, str(tmp_path))
    assert len(paths) == 3 and len(asked) == 4
    assert all(piece == 16_000 // POOL_PIECES for _, piece in asked)
    sizes = [sum(len(line.split()) + 1 for line in open(p)) for p in paths]
    assert all(n >= 1000 for n in sizes) and asked[-1][0] == sum(sizes)
    assert len({open(p).read() for p in paths}) == 3                  # seeds differ


def test_sample_shares_give_the_first_network_twice_the_others():
    from nplm.compose.distil import sample_shares
    assert sample_shares(120, 2) == [80, 40]
    assert sample_shares(100, 3) == [50, 25, 25] and sum(sample_shares(7, 3)) == 7
    assert sample_shares(5, 1) == [5]


def test_lean_options_go_together():
    from nplm.compose.distil import DistilConfig
    with pytest.raises(ValueError, match="favour_model and favour_valid"):
        DistilConfig(order=3, favour_model="kn.arpa").check()
    with pytest.raises(ValueError, match="sample_models"):
        DistilConfig(order=3, sample_tokens=10).check()


def test_a_network_without_variable_history_is_named_as_the_cause(corpus, tmp_path):
    """A teacher whose network lacks variable history teaches the top order only: the
    table barely beats its back-off input, and the warning says why."""
    d, kn, net, spec = corpus
    short = tmp_path / "short.nplm"
    train(str(d / "train.txt"), str(d / "valid.txt"), str(short),
          NeuralConfig(order=ORDER, embedding_dim=64, variable_history=False),
          TrainConfig(epochs=4, threads=1, seed=3), log=lambda s: None, progress=False)
    mix = interpolate([str(kn), str(short)])
    mix.tune(str(d / "valid.txt"))
    mix.save(str(tmp_path / "mix.json"), tuned_on=str(d / "valid.txt"))
    with pytest.warns(distil_auto.DistilQualityWarning, match="--no-variable-history") as caught:
        tables, report, plan = distil_auto.distil_auto_to_file(str(tmp_path / "mix.json"), str(tmp_path / "t.arpa"),
                                                               ORDER, str(d / "train.txt"), quality="fast")
    assert plan.parts.short_history and report.table > distil_auto.SMALL_GAIN * report.backoff
    assert any("gains only" in str(w.message) or "WORSE" in str(w.message) for w in caught)
