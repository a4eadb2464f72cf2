"""Tests for nplm.clusters: frequency bins, Brown exchange clustering, layouts, Huffman trees.

Objectives and optimal costs are recomputed here by brute force in pure Python."""
import heapq
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nplm.io import container
from nplm.neural.clusters import (
    ClassLayout,
    HuffmanTree,
    brown_clusters,
    class_bigram_stats,
    frequency_bins,
    huffman_tree,
)

from helpers import SHARED

PTB5K = SHARED / "reference" / "ptb5k.txt"


def zipf_counts(V, seed=0):
    rng = np.random.default_rng(seed)
    counts = (1e5 / np.arange(1, V + 1) ** 1.1).astype(np.int64)
    return rng.permutation(counts)


def corpus_ids(path, max_lines=None):
    vocab, ids = {"</s>": 0}, []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if max_lines is not None and i >= max_lines:
                break
            ids.extend(vocab.setdefault(w, len(vocab)) for w in line.split())
            ids.append(0)
    return np.array(ids, dtype=np.int32), len(vocab)


@pytest.fixture(scope="module")
def ptb5k():
    if not SHARED.is_dir():
        pytest.skip("../shared absent (PTB reference corpus)")
    return corpus_ids(PTB5K)


def brute_loglik(ids, word_class):
    """Class bigram log-likelihood, token by token: sum_i log p(c_i|c_{i-1}) p(w_i|c_i)."""
    ids = [int(w) for w in ids]
    cls = [int(word_class[w]) for w in ids]
    pair, left, right, word = Counter(), Counter(), Counter(), Counter()
    for i in range(1, len(ids)):
        pair[cls[i - 1], cls[i]] += 1
        left[cls[i - 1]] += 1
        right[cls[i]] += 1
        word[ids[i]] += 1
    total = 0.0
    for i in range(1, len(ids)):
        total += math.log(pair[cls[i - 1], cls[i]] / left[cls[i - 1]])
        total += math.log(word[ids[i]] / right[cls[i]])
    return total


def same_partition(a, b):
    pairs = set(zip(np.asarray(a).tolist(), np.asarray(b).tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


# --- frequency bins -----------------------------------------------------------------


@pytest.mark.parametrize("power", [0.5, 1.0])
@pytest.mark.parametrize("V,C", [(1000, 10), (1000, 100), (50, 50), (7, 3), (1, 1)])
def test_frequency_bins_balanced_and_contiguous(V, C, power):
    counts = zipf_counts(V)
    wc = frequency_bins(counts, C, power=power)
    assert wc.dtype == np.int32 and wc.shape == (V,)
    assert np.all(np.bincount(wc, minlength=C) > 0) and wc.max() == C - 1
    # classes are contiguous runs of the frequency-sorted vocabulary (ties: lower id first)
    order = sorted(range(V), key=lambda w: (-counts[w], w))
    assert np.all(np.diff(wc[order]) >= 0)
    # no class holds more than its share plus one word's mass
    mass = counts.astype(float) ** power
    mass /= mass.sum()
    for c in range(C):
        members = wc == c
        assert mass[members].sum() <= 1 / C + mass[members].max() + 1e-12


def test_frequency_bins_deterministic_and_sqrt_is_more_even():
    counts = zipf_counts(5000, seed=3)
    a = frequency_bins(counts, 50)
    assert np.array_equal(a, frequency_bins(counts.copy(), 50))
    assert np.array_equal(a, frequency_bins(list(counts), 50))
    plain = frequency_bins(counts, 50, power=1.0)
    # sqrt mass spreads words over classes more evenly than plain unigram mass
    assert np.bincount(a).max() < np.bincount(plain).max()


def test_frequency_bins_zero_counts():
    wc = frequency_bins([0, 0, 0, 0], 2)
    assert sorted(np.bincount(wc).tolist()) == [2, 2]
    wc = frequency_bins([10, 0, 0, 0, 5], 3)
    assert np.all(np.bincount(wc, minlength=3) > 0)
    assert wc[0] == 0


@pytest.mark.parametrize("counts,C,match", [
    ([3, 2, 1], 0, "between 1 and"),
    ([3, 2, 1], 4, "between 1 and"),
    ([3, -2, 1], 2, r"counts\[1\] = -2 is negative"),
    ([], 1, "empty vocabulary"),
    ([1.5, 2], 1, "not a whole number"),
    ([[1, 2]], 1, "one-dimensional"),
])
def test_frequency_bins_bad_input(counts, C, match):
    with pytest.raises(ValueError, match=match):
        frequency_bins(counts, C)


# --- Brown clustering ---------------------------------------------------------------


def toy_grammar(n_sentences, seed=0):
    """Sentences DET ADJ? NOUN VERB (DET NOUN | PRON) </s>: words of one part of speech
    are interchangeable, so the parts of speech are the best 6-class clustering.
    (Without PRON, </s> would share its left and right neighbours with VERB.)"""
    rng = np.random.default_rng(seed)
    pos = {"DET": ["the", "a", "this", "every"], "ADJ": ["big", "red", "old"],
           "NOUN": ["dog", "cat", "man", "idea", "car", "tree"],
           "VERB": ["sees", "likes", "eats", "moves", "finds"], "PRON": ["him", "her", "it"]}
    words = ["</s>"] + [w for tag in pos for w in pos[tag]]
    wid = {w: i for i, w in enumerate(words)}
    truth = np.zeros(len(words), dtype=np.int32)
    for t, tag in enumerate(pos, start=1):
        truth[[wid[w] for w in pos[tag]]] = t
    ids = []
    for _ in range(n_sentences):
        sent = [rng.choice(pos["DET"])]
        if rng.random() < 0.5:
            sent.append(rng.choice(pos["ADJ"]))
        sent += [rng.choice(pos["NOUN"]), rng.choice(pos["VERB"])]
        if rng.random() < 0.3:
            sent.append(rng.choice(pos["PRON"]))
        else:
            sent += [rng.choice(pos["DET"]), rng.choice(pos["NOUN"])]
        sent.append("</s>")
        ids += [wid[w] for w in sent]
    return np.array(ids, dtype=np.int32), len(words), truth


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_brown_recovers_toy_grammar(seed):
    ids, V, truth = toy_grammar(3000, seed=seed)
    wc = brown_clusters(ids, V, 6, seed=seed)
    assert same_partition(wc, truth), wc
    # Started from frequency bins, exchange can stop in a worse local optimum (it
    # does here, which is why round-robin is the default), but it still improves.
    counts = np.bincount(ids, minlength=V)
    from_bins = brown_clusters(ids, V, 6, init="bins")
    assert brute_loglik(ids, wc) >= brute_loglik(ids, from_bins) - 1e-6
    assert brute_loglik(ids, from_bins) > brute_loglik(ids, frequency_bins(counts, 6))


def test_brown_loglik_rises_every_pass_and_matches_brute_force(ptb5k):
    ids, V = ptb5k
    ids = ids[:30000]
    seen = []
    wc = brown_clusters(ids, V, 20, iterations=6, tol=0,
                        callback=lambda it, moves, ll: seen.append((moves, ll)))
    assert len(seen) == 6 and all(m > 0 for m, _ in seen)
    brute = [brute_loglik(ids, brown_clusters(ids, V, 20, iterations=n, tol=0)) for n in range(7)]
    # the kernel's incremental bookkeeping gives the true objective after each pass
    assert np.allclose([ll for _, ll in seen], brute[1:], rtol=1e-10)
    assert all(b1 > b0 for b0, b1 in zip(brute, brute[1:]))
    assert brute[-1] == pytest.approx(brute_loglik(ids, wc), rel=1e-12)


def test_brown_converged_is_a_local_optimum():
    """After convergence no single word move (that keeps classes non-empty) helps."""
    rng = np.random.default_rng(5)
    V, C = 25, 4
    ids = rng.choice(V, size=600, p=np.arange(V, 0, -1) / (V * (V + 1) / 2)).astype(np.int32)
    wc = brown_clusters(ids, V, C, iterations=100, tol=0)
    base = brute_loglik(ids, wc)
    sizes = np.bincount(wc, minlength=C)
    for w in np.unique(ids):
        if sizes[wc[w]] == 1:
            continue
        for k in range(C):
            moved = wc.copy()
            moved[w] = k
            assert brute_loglik(ids, moved) <= base + 1e-6, (w, k)


def test_brown_beats_frequency_bins_on_ptb5k(ptb5k):
    ids, V = ptb5k
    counts = np.bincount(ids, minlength=V)
    for C in (5, 20):
        wc = brown_clusters(ids, V, C)
        bins = frequency_bins(counts, C)
        got, ref = class_bigram_stats(ids, wc), class_bigram_stats(ids, bins)
        assert got["loglik"] > ref["loglik"] and got["mutual_info"] > ref["mutual_info"]
        assert got["loglik"] == pytest.approx(brute_loglik(ids, wc), rel=1e-10)
        assert np.all(np.bincount(wc, minlength=C) > 0)


def test_brown_deterministic_zero_counts_and_seed():
    ids, V, _ = toy_grammar(300)
    V_big = V + 7                       # seven words never seen in the stream
    a = brown_clusters(ids, V_big, 6)
    assert a.dtype == np.int32 and a.shape == (V_big,)
    assert np.array_equal(a, brown_clusters(ids.tolist(), V_big, 6))
    assert np.all(np.bincount(a, minlength=6) > 0) and a.max() == 5
    b = brown_clusters(ids, V_big, 6, seed=7)
    assert np.array_equal(b, brown_clusters(ids, V_big, 6, seed=7))
    assert np.all(np.bincount(b, minlength=6) > 0)
    # every word is its own class when C == V; one class when C == 1
    assert sorted(brown_clusters(ids, V_big, V_big).tolist()) == list(range(V_big))
    assert not brown_clusters(ids, V_big, 1).any()
    # too short to hold a bigram: the initial assignment comes back
    assert np.all(np.bincount(brown_clusters([3], V, 4), minlength=4) > 0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(ids=[0, 1, 2], vocab_size=3, n_classes=0), "between 1 and"),
    (dict(ids=[0, 1, 2], vocab_size=3, n_classes=4), "between 1 and"),
    (dict(ids=[0, 1, 5], vocab_size=3, n_classes=2), r"ids\[2\] = 5 is outside"),
    (dict(ids=[0, -1], vocab_size=3, n_classes=2), r"ids\[1\] = -1 is outside"),
    (dict(ids=[], vocab_size=0, n_classes=1), "empty vocabulary"),
    (dict(ids=[0.5, 1.0], vocab_size=3, n_classes=2), "must be integers"),
    (dict(ids=[0, 1], vocab_size=3, n_classes=2, init="foo"), "init must be"),
    (dict(ids=[0, 1], vocab_size=3, n_classes=2, init=np.array([0, 0, 0])), "empty"),
])
def test_brown_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        brown_clusters(**kwargs)


def test_class_bigram_stats_bad_input():
    with pytest.raises(ValueError, match="for each of the 3 words"):
        class_bigram_stats([0, 1, 2], [0, 1], vocab_size=3)
    with pytest.raises(ValueError, match=r"ids\[2\] = 3 is outside"):
        class_bigram_stats([0, 1, 3], [0, 1, 1])
    with pytest.raises(ValueError, match="at least two tokens"):
        class_bigram_stats([1], [0, 1])


# --- class layout -------------------------------------------------------------------


def test_class_layout_arrays_and_factored_softmax_sums_to_one():
    wc = np.array([2, 0, 1, 2, 0, 0, 1])
    lay = ClassLayout.from_assignment(wc)
    assert lay.n_classes == 3 and lay.vocab_size == 7
    for c in range(3):
        members = lay.class_words[lay.class_start[c]:lay.class_start[c + 1]]
        assert members.tolist() == np.flatnonzero(wc == c).tolist()
        assert np.array_equal(lay.word_pos[members], np.arange(members.size))
    # p(w) = p(class | h) p(w | class, h) with random scores is a distribution
    rng = np.random.default_rng(0)
    class_scores, word_scores = rng.normal(size=3), rng.normal(size=7)
    pc = np.exp(class_scores) / np.exp(class_scores).sum()
    p = np.empty(7)
    for c in range(3):
        members = lay.class_words[lay.class_start[c]:lay.class_start[c + 1]]
        e = np.exp(word_scores[members])
        p[members] = pc[c] * e / e.sum()
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_class_layout_roundtrips_through_container(tmp_path):
    wc = frequency_bins(zipf_counts(300), 17)
    lay = ClassLayout.from_assignment(wc)
    path = tmp_path / "layout.nplm"
    container.write(path, "classes", {"n_classes": lay.n_classes}, lay.to_arrays())
    loaded = ClassLayout.from_arrays(container.read(path, expect_kind="classes").arrays)
    for name, arr in lay.to_arrays().items():
        assert np.array_equal(getattr(loaded, name), arr) and arr.dtype == np.int32


def test_class_layout_rejects_bad_input():
    with pytest.raises(ValueError, match="class 1 has no words"):
        ClassLayout.from_assignment([0, 2, 2])
    with pytest.raises(ValueError, match="negative"):
        ClassLayout.from_assignment([0, -1])
    with pytest.raises(ValueError, match="non-empty"):
        ClassLayout.from_assignment([])
    with pytest.raises(ValueError, match="not below n_classes"):
        ClassLayout.from_assignment([0, 1, 2], n_classes=2)
    good = ClassLayout.from_assignment([1, 0, 1, 0]).to_arrays()
    for name, bad in [("class_words", [0, 0, 2, 3]), ("word_pos", [0, 0, 0, 0]),
                      ("class_start", [0, 4, 4]), ("word_class", [0, 0, 1, 1])]:
        broken = dict(good, **{name: np.array(bad, dtype=np.int32)})
        with pytest.raises(ValueError):
            ClassLayout.from_arrays(broken)
    with pytest.raises(ValueError, match="missing"):
        ClassLayout.from_arrays({"word_class": good["word_class"]})


# --- Huffman tree -------------------------------------------------------------------


def optimal_cost(counts):
    """Cost sum(count * depth) of an optimal prefix code: the sum of all merge weights."""
    heap = list(counts)
    heapq.heapify(heap)
    cost = 0
    while len(heap) > 1:
        merged = heapq.heappop(heap) + heapq.heappop(heap)
        cost += merged
        heapq.heappush(heap, merged)
    return cost


def code_strings(tree):
    return ["".join(map(str, tree.codes[w, :tree.lengths[w]])) for w in range(tree.vocab_size)]


@pytest.mark.parametrize("counts", [
    [5, 1, 1, 2, 9, 0], [1, 1], [3, 3, 3, 3], [0, 0, 0], [7, 0, 1],
    list(zipf_counts(1000)), list(np.random.default_rng(1).integers(0, 50, size=300)),
])
def test_huffman_optimal_prefix_free_consistent(counts):
    tree = huffman_tree(counts)
    V = len(counts)
    assert tree.points.dtype == np.int32 and tree.codes.dtype == np.int8
    assert tree.points.shape == tree.codes.shape == (V, tree.lengths.max())
    assert int(np.dot(tree.lengths, counts)) == optimal_cost(counts)
    codes = code_strings(tree)
    assert len(set(codes)) == V
    for a in codes:
        assert not any(b != a and b.startswith(a) for b in codes)
    # same code prefix <=> same inner node; every inner node 0..V-2 is used; root first
    node_of = {}
    for w in range(V):
        for j in range(tree.lengths[w]):
            assert node_of.setdefault(codes[w][:j], tree.points[w, j]) == tree.points[w, j]
        assert np.all(tree.points[w, tree.lengths[w]:] == -1)
    assert sorted(node_of.values()) == list(range(V - 1)) and node_of[""] == V - 2
    # zero counts are the deepest leaves
    counts = np.asarray(counts)
    if 0 < (counts == 0).sum() < V:
        assert tree.lengths[counts == 0].min() >= tree.lengths[counts > 0].max()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=2, max_size=60))
def test_huffman_property_optimal_and_prefix_free(counts):
    tree = huffman_tree(counts)
    assert int(np.dot(tree.lengths, counts)) == optimal_cost(counts)
    codes = code_strings(tree)
    assert not any(a != b and b.startswith(a) for a in codes for b in codes)
    assert len(set(codes)) == len(counts)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=80), st.data())
def test_frequency_bins_property(counts, data):
    C = data.draw(st.integers(1, len(counts)))
    wc = frequency_bins(counts, C)
    assert np.all(np.bincount(wc, minlength=C) > 0) and wc.max() == C - 1
    order = sorted(range(len(counts)), key=lambda w: (-counts[w], w))
    assert np.all(np.diff(wc[order]) >= 0)


def test_huffman_tree_softmax_sums_to_one():
    counts = zipf_counts(2000, seed=4)
    tree = huffman_tree(counts)
    rng = np.random.default_rng(0)
    inner = rng.normal(size=(tree.vocab_size - 1, 16))
    h = rng.normal(size=16)
    sig = 1 / (1 + np.exp(-inner @ h))           # P(code 0) at each inner node
    mask = np.arange(tree.max_length)[None, :] < tree.lengths[:, None]
    branch = np.where(tree.codes == 0, sig[tree.points], 1 - sig[tree.points])
    p = np.where(mask, branch, 1.0).prod(axis=1)
    assert p.sum() == pytest.approx(1.0, abs=1e-9)


def test_huffman_deterministic_small_trees_and_roundtrip(tmp_path):
    counts = zipf_counts(500, seed=2)
    a, b = huffman_tree(counts), huffman_tree(counts.tolist())
    for name in ("points", "codes", "lengths"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    path = tmp_path / "tree.nplm"
    container.write(path, "huffman", {}, a.to_arrays())
    loaded = HuffmanTree.from_arrays(container.read(path).arrays)
    assert code_strings(loaded) == code_strings(a) and np.array_equal(loaded.points, a.points)
    one = huffman_tree([4])
    assert one.lengths.tolist() == [0] and one.points.shape == (1, 0)
    two = huffman_tree([4, 1])
    assert two.codes[:, 0].tolist() == [1, 0] and two.points[:, 0].tolist() == [0, 0]
    broken = dict(a.to_arrays(), codes=np.full_like(a.codes, 2))
    with pytest.raises(ValueError, match="codes"):
        HuffmanTree.from_arrays(broken)
    broken = dict(a.to_arrays(), lengths=a.lengths[:-1])
    with pytest.raises(ValueError):
        HuffmanTree.from_arrays(broken)


@pytest.mark.parametrize("counts,match", [
    ([], "empty vocabulary"), ([1, -3], r"counts\[1\] = -3 is negative"), ([[1]], "one-dimensional"),
])
def test_huffman_bad_input(counts, match):
    with pytest.raises(ValueError, match=match):
        huffman_tree(counts)


# --- text helpers and the `nplm cluster` command ----------------------------------------


def test_cluster_command_writes_classes(tmp_path):
    from nplm.cli.main import main
    ids, V, truth = toy_grammar(400, seed=9)
    words = ["</s>", "the", "a", "this", "every", "big", "red", "old", "dog", "cat", "man", "idea",
             "car", "tree", "sees", "likes", "eats", "moves", "finds", "him", "her", "it"]
    text = tmp_path / "toy.txt"
    sent = " ".join(words[i] for i in ids).split(" </s>")
    text.write_text("\n".join(s.strip() for s in sent if s.strip()) + "\n", encoding="utf-8")
    out = tmp_path / "classes.tsv"
    assert main(["cluster", "--text", str(text), "-c", "6", "-o", str(out), "-q"]) == 0
    rows = [line.split("\t") for line in out.read_text(encoding="utf-8").splitlines()]
    expected = Counter(text.read_text(encoding="utf-8").split())
    expected["</s>"] = len(text.read_text(encoding="utf-8").splitlines())
    assert {w: int(n) for w, _, n in rows} == dict(expected)
    assert [int(n) for _, _, n in rows] == sorted((int(n) for _, _, n in rows), reverse=True)
    got = np.array([int(c) for _, c, _ in rows])
    assert same_partition(got, truth[[words.index(w) for w, _, _ in rows]])
    assert main(["cluster", "--text", str(text), "-c", "6", "-o", str(out), "-q",
                 "--method", "frequency"]) == 0


def test_cluster_command_bad_input(tmp_path, capsys):
    from nplm.cli.main import main
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine words\nmore words\nbroken \xff here\n")
    assert main(["cluster", "--text", str(bad), "-c", "2", "-q"]) == 1
    assert f"{bad}:3: not UTF-8" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert main(["cluster", "--text", str(empty), "-c", "1", "-q"]) == 1
    assert "no words" in capsys.readouterr().err
    good = tmp_path / "good.txt"
    good.write_text("a b c\n")
    assert main(["cluster", "--text", str(good), "-c", "9", "-q"]) == 1
    assert "between 1 and the vocabulary size (4)" in capsys.readouterr().err


def test_read_corpus_refuses_the_reserved_tokens_training_refuses(tmp_path):
    """<s> and <null> inside a line are refused naming the line, as nplm train refuses
    them (a class for the padding word is meaningless); </s> is the sentence end."""
    from nplm.errors import FormatError
    from nplm.neural.clusters import read_corpus
    for token in ("<s>", "<null>"):
        path = tmp_path / "t.txt"
        path.write_text(f"a b\nc {token} d\n")
        with pytest.raises(FormatError, match=f"reserved token '{token}'") as e:
            read_corpus(path)
        assert ":2" in str(e.value)
    path.write_text("a b\nc d\n")
    words, counts, ids = read_corpus(path)
    assert sorted(words) == ["</s>", "a", "b", "c", "d"]
