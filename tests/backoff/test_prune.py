"""nplm prune against brute force on tiny models: each n-gram's criterion is the
relative entropy change computed over the whole vocabulary and every history, a
threshold removes exactly the n-grams it should, every context of the result sums to
one (by the real kenlm), a KenLM binary (the real build_binary's) prunes as its ARPA,
and a target size is met exactly."""
import math
import subprocess

import kenlm
import numpy as np
import pytest
from _brute import Backoff, context_sums, estimate, kenlm_log10, listed, relative_entropy, write_corpus

import nplm.cli.prune  # noqa: F401 (registers the commands)
from nplm.cli.main import main
from nplm.compose import prune as lib
from nplm.convert import backoff_tables

from helpers import kenlm_program, make_net


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("prune")
    arpa = estimate(write_corpus(d / "a.txt", 1), d / "a.arpa", 3)
    return d, arpa


def brute_criteria(arpa_or_probs, order):
    m = Backoff(listed(arpa_or_probs) if not isinstance(arpa_or_probs, dict) else arpa_or_probs, order)
    return m, {g: relative_entropy(m, m.without(g), len(g) - 1) for g in m.p if len(g) > 1}


def library_criteria(model, reference=None):
    crit = lib.criteria(str(model), backoff_tables(str(model), "arpa"), reference)
    return {tuple(row): d for n, (words, D) in crit.items() for row, d in zip(words.tolist(), D.tolist())}


def expected_kept(D, theta, order):
    """The n-grams a threshold keeps: criterion at least theta, or the context or the
    lower-order n-gram of a kept longer one (top down)."""
    kept = set()
    for n in range(order, 1, -1):
        needed = {g[:-1] for g in kept if len(g) == n + 1} | {g[1:] for g in kept if len(g) == n + 1}
        kept |= {g for g, d in D.items() if len(g) == n and (math.expm1(d) >= theta or g in needed)}
    return kept


def test_criterion_of_every_ngram_is_the_relative_entropy_change(tiny):
    d, arpa = tiny
    _, brute = brute_criteria(arpa, 3)
    ours = library_criteria(arpa)
    assert set(ours) == set(brute) and len(brute) > 100
    for g, D in brute.items():
        assert D > 0
        assert abs(ours[g] - D) <= 1e-9 * D, (g, ours[g], D)


def test_threshold_removes_exactly_what_the_criterion_says(tiny):
    d, arpa = tiny
    m, D = brute_criteria(arpa, 3)
    theta = float(np.median([math.expm1(x) for x in D.values()]))
    out = d / "t.arpa"
    assert main(["prune", str(arpa), str(out), "--threshold", repr(theta), "-q"]) == 0
    got = listed(out)
    kept = expected_kept(D, theta, 3)
    assert {g for g in got if len(g) > 1} == kept
    assert 0 < len({g for g in kept if len(g) == 3}) < len({g for g in D if len(g) == 3})
    assert {g for g in got if len(g) == 1} == {g for g in m.p if len(g) == 1}     # unigrams all kept
    for g in kept:          # a kept n-gram keeps its probability
        assert abs(math.log10(got[g]) - math.log10(m.p[g])) < 1e-6


def test_every_context_of_the_pruned_model_sums_to_one(tiny):
    d, arpa = tiny
    out = d / "s.arpa"
    assert main(["prune", str(arpa), str(out), "--target-size", "60", "-q"]) == 0
    got = listed(out)
    contexts = [(), ("<s>",)] + [g for g in got if len(g) < 3 and g != ("<s>",)]
    for h, total in context_sums(out, contexts).items():
        assert abs(total - 1.0) < 1e-6, (h, total)


def test_a_kenlm_binary_prunes_as_its_arpa(tiny):
    d, arpa = tiny
    probing = d / "a.probing"
    subprocess.run([kenlm_program("build_binary"), "-s", "probing", str(arpa), str(probing)], check=True,
                   capture_output=True)
    a, b = d / "from-arpa.arpa", d / "from-binary.arpa"
    for src, out in ((arpa, a), (probing, b)):
        assert main(["prune", str(src), str(out), "--threshold", "1e-3", "-q"]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert len(listed(a)) < len(listed(arpa))


def test_a_trie_output_is_what_build_binary_writes(tiny):
    d, arpa = tiny
    ours, text = d / "ours.trie", d / "p.arpa"
    assert main(["prune", str(arpa), str(ours), "--target-size", "80", "--type", "trie", "-q", "8", "-b", "8",
                 "--quiet"]) == 0
    assert main(["prune", str(arpa), str(text), "--target-size", "80", "-q"]) == 0
    theirs = d / "theirs.trie"
    subprocess.run([kenlm_program("build_binary"), "-q", "8", "-b", "8", "trie", str(text), str(theirs)],
                   check=True, capture_output=True)
    assert ours.read_bytes() == theirs.read_bytes()
    k = kenlm.Model(str(ours))
    assert k.order == 3 and math.isfinite(k.score("a b c d", bos=True, eos=True))


def test_target_size_is_honoured_exactly(tiny):
    """At most N n-grams of orders >= 2, and no threshold keeps more within N."""
    d, arpa = tiny
    _, D = brute_criteria(arpa, 3)
    sizes = {theta: len(expected_kept(D, theta, 3)) for theta in [math.expm1(x) for x in D.values()] + [math.inf]}
    tables = backoff_tables(str(arpa), "arpa")
    total = sum(tables.counts[1:])
    for N in list(range(1, total + 2, 9)) + [total - 1, total]:
        got = sum(lib.prune(str(arpa), tables, target_size=N).after[1:])
        best = max(k for k in sizes.values() if k <= N) if N < total else total
        assert got == best <= N, (N, got, best)
    out = d / "n.arpa"
    assert main(["prune", str(arpa), str(out), "--target-size", "50", "-q"]) == 0
    assert sum(1 for g in listed(out) if len(g) > 1) == max(k for k in sizes.values() if k <= 50)


def test_a_reference_gives_its_probabilities_and_its_relative_entropy(tiny):
    """With --reference, the model's n-grams carry the reference's probabilities, and
    the criterion is the relative entropy change of that table."""
    d, arpa = tiny
    ref = estimate(write_corpus(d / "r.txt", 2, lines=120), d / "r.arpa", 4)
    km = kenlm.Model(str(ref))
    grams = listed(arpa)
    probs = {g: 10.0 ** kenlm_log10(km, g[:-1], g[-1]) for g in grams}
    _, brute = brute_criteria(probs, 3)
    ours = library_criteria(arpa, reference=str(ref))
    for g, D in brute.items():
        assert abs(ours[g] - D) <= 1e-6 * D + 1e-15, (g, ours[g], D)
    out = d / "ref.arpa"
    assert main(["prune", str(arpa), str(out), "--target-size", "70", "--reference", str(ref), "-q"]) == 0
    got = listed(out)
    for g, p in got.items():
        if len(g) > 1:
            assert abs(math.log10(p) - math.log10(probs[g])) < 1e-6, g


def test_bad_inputs_are_one_line_errors(tiny, tmp_path, capsys):
    d, arpa = tiny
    text = d / "a.txt"
    net = tmp_path / "net.nplm"
    make_net("softmax-full-2").save(str(net))
    other = estimate(write_corpus(tmp_path / "o.txt", 3, words=["a", "b", "zz"]), tmp_path / "o.arpa", 2)
    for argv, says in ((["prune", str(text), str(tmp_path / "x.arpa"), "--threshold", "0"], "a.txt"),
                       (["prune", str(net), str(tmp_path / "y.arpa"), "--threshold", "0"], "lists no n-grams"),
                       (["prune", str(arpa), str(tmp_path / "z.arpa"), "--threshold", "0", "--reference",
                         str(other)], "lacks")):
        capsys.readouterr()
        assert main(argv) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith("nplm: error:") and "\n" not in err and says in err, err
        assert not (tmp_path / argv[2]).exists()
