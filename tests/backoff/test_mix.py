"""nplm mix against the dynamic linear mixture computed from the real kenlm's
scores of each component: the written model lists the union of the components'
n-grams, gives each the mixture's probability, sums to one in every context, and
the perplexities it reports are the two models' own."""
import math
import re

import kenlm
import pytest
from _brute import context_sums, estimate, kenlm_log10, listed, write_corpus

import nplm
import nplm.cli.prune  # noqa: F401 (registers the commands)
from nplm.cli.main import main
from nplm.compose.interpolate import interpolate

from helpers import make_net


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    """A bigram and a trigram model of two texts over the same words, and a dev text."""
    d = tmp_path_factory.mktemp("mix")
    a = estimate(write_corpus(d / "a.txt", 3), d / "a.arpa", 2)
    b = estimate(write_corpus(d / "b.txt", 4, lines=150), d / "b.arpa", 3)
    dev = write_corpus(d / "dev.txt", 5, lines=40)
    return d, a, b, dev


def dynamic_log10(models, weights, h, w):
    return math.log10(sum(lam * 10.0 ** kenlm_log10(m, h, w) for lam, m in zip(weights, models)))


def test_static_mixture_is_the_dynamic_one_on_its_ngrams(parts):
    d, a, b, _ = parts
    out = d / "m.arpa"
    assert main(["mix", str(a), str(b), "--weights", "0.3", "0.7", "--out", str(out), "--quiet"]) == 0
    got = listed(out)
    assert set(got) == set(listed(a)) | set(listed(b))
    models = [kenlm.Model(str(a)), kenlm.Model(str(b))]
    for g, p in got.items():
        if g != ("<s>",):
            assert abs(math.log10(p) - dynamic_log10(models, [0.3, 0.7], g[:-1], g[-1])) < 1e-6, g
    contexts = [(), ("<s>",)] + [g for g in got if len(g) < 3 and g != ("<s>",)]
    for h, total in context_sums(out, contexts).items():
        assert abs(total - 1.0) < 1e-6, (h, total)


def corpus_log10(score, dev):
    total = 0.0
    n = 0
    for line in dev.read_text().splitlines():
        words = ["<s>"] + line.split() + ["</s>"]
        for i in range(1, len(words)):
            total += score(tuple(words[:i]), words[i])
            n += 1
    return total, n


def test_tuned_weights_and_the_perplexities_reported(parts, capsys):
    d, a, b, dev = parts
    out = d / "t.arpa"
    capsys.readouterr()
    assert main(["mix", str(a), str(b), "--tune", str(dev), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    weights = [float(x) for x in re.search(r"weights tuned on \S+: (\S+ \S+)", err).group(1).split()]
    tuned = interpolate([str(a), str(b)], None, "linear")
    tuned.tune(str(dev))
    assert weights == pytest.approx(list(tuned.weights), rel=1e-5)
    static, dynamic = map(float, re.search(r"perplexity of \S+: (\S+) \(dynamic mixture (\S+)\)", err).groups())
    models = [kenlm.Model(str(a)), kenlm.Model(str(b))]
    total, n = corpus_log10(lambda h, w: dynamic_log10(models, weights, h[-2:], w), dev)
    assert dynamic == pytest.approx(10 ** (-total / n), rel=1e-4)
    mixed = kenlm.Model(str(out))
    total, n = corpus_log10(lambda h, w: kenlm_log10(mixed, h[-2:], w), dev)
    assert static == pytest.approx(10 ** (-total / n), rel=1e-4)
    assert static != pytest.approx(dynamic, rel=1e-6)      # a static mixture backs off differently


def test_a_spec_mixes_with_its_weights(parts, tmp_path):
    d, a, b, _ = parts
    spec = tmp_path / "mix.json"
    assert main(["interpolate", "--model", str(a), "--model", str(b), "--weight", "0.25", "--weight", "0.75",
                 "--out", str(spec), "--quiet"]) == 0
    x, y = tmp_path / "x.arpa", tmp_path / "y.nplm"
    assert main(["mix", str(spec), "--out", str(x), "--quiet"]) == 0
    assert main(["mix", str(a), str(b), "--weights", "0.25", "0.75", "--out", str(y), "--quiet"]) == 0
    kx, ky = kenlm.Model(str(x)), nplm.Model(str(y))
    for sentence in ("a b c", "f e d c b a", "a a a a"):
        assert kx.score(sentence) == pytest.approx(ky.score(sentence), abs=1e-5)


def test_bad_inputs_are_one_line_errors(parts, tmp_path, capsys):
    d, a, b, _ = parts
    net = tmp_path / "net.nplm"
    make_net("softmax-full-2").save(str(net))
    for argv, says in ((["mix", str(a), str(net), "--out", str(tmp_path / "x.arpa")], "lists no n-grams"),
                       (["mix", str(a), str(b), "--weights", "1", "--out", str(tmp_path / "y.arpa")], "1 --weights")):
        capsys.readouterr()
        assert main(argv) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("nplm: error:") and "\n" not in err and says in err, err
