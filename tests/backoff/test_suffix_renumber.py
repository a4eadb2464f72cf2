"""The kernels of lmplz --renumber's order (nplm/src/suffix_renumber.h): the new
suffix order against numpy's lexsort, by runs of the order below and by the radix
sort, on random rows with ties, long runs and empty or one-row tables; the
intermediate files' records against numpy's structured arrays; bad ids refused."""

import numpy as np
import pytest

from nplm.backoff.estimate import estimate
from nplm.backoff.kenlm import _renumber, intermediate

from helpers import zipf_text


def lexsorted(ids, new_id):
    """numpy's stable suffix order of the rows in new ids: the last word first."""
    return np.lexsort(new_id[ids].T) if ids.shape[1] else np.arange(len(ids))


def model_orders(rng, vocab, sizes):
    """Distinct n-grams of orders 1..len(sizes)+1 in suffix order of their ids, each
    order's suffixes in the order below (which has rows no n-gram extends too)."""
    orders = [np.arange(vocab, dtype=np.int32)[:, None]]
    for size in sizes:
        prev = orders[-1]
        rows = np.column_stack([rng.integers(0, vocab, size), prev[rng.integers(0, len(prev), size)]])
        rows = np.unique(rows.astype(np.int32), axis=0)
        orders.append(np.ascontiguousarray(rows[np.lexsort(rows.T)]))
    return orders


def permutation(rng, vocab):
    return rng.permutation(vocab).astype(np.int32)


@pytest.mark.parametrize("n,k,vocab", [(0, 3, 5), (1, 1, 1), (1, 4, 3), (2, 2, 2), (500, 1, 40), (3000, 3, 7),
                                       (2000, 5, 300), (257, 2, 1)])
def test_radix_order_is_lexsorts(n, k, vocab):
    rng = np.random.default_rng(n + k)
    ids = rng.integers(0, vocab, (n, k)).astype(np.int32)      # ties galore
    new_id = permutation(rng, vocab)
    assert np.array_equal(_renumber.suffix_permutation(ids, new_id), lexsorted(ids, new_id))


@pytest.mark.parametrize("vocab,sizes", [(3, [5, 9]), (50, [2000, 3000, 3000]), (2000, [400, 300, 200, 100]),
                                         (30, [800])])
def test_order_by_runs_is_lexsorts(vocab, sizes):
    """Runs of one row, of many (past the insertion sort's 24) and rows of the order
    below that nothing extends."""
    rng = np.random.default_rng(vocab)
    orders = model_orders(rng, vocab, sizes)
    new_id = permutation(rng, vocab)
    perm = np.argsort(new_id).astype(np.int64)
    for k in range(1, len(orders)):
        got = _renumber.suffix_permutation(orders[k], new_id, orders[k - 1], perm)
        perm = lexsorted(orders[k], new_id)
        assert np.array_equal(got, perm), k


def test_missing_suffix_falls_back_to_the_radix_sort():
    rng = np.random.default_rng(5)
    uni, bi, tri = model_orders(rng, 40, [300, 500])
    new_id = permutation(rng, 40)
    bi_perm = lexsorted(bi, new_id)
    holes = np.ones(len(bi), dtype=bool)
    holes[::7] = False                     # bigrams some trigrams end in, gone
    kept = np.ascontiguousarray(bi[holes])
    got = _renumber.suffix_permutation(tri, new_id, kept, lexsorted(kept, new_id))
    assert np.array_equal(got, lexsorted(tri, new_id))
    # an empty order below, and rows out of suffix order
    assert np.array_equal(_renumber.suffix_permutation(tri, new_id, bi[:0], bi_perm[:0]), lexsorted(tri, new_id))
    shuffled = np.ascontiguousarray(tri[rng.permutation(len(tri))])
    assert np.array_equal(_renumber.suffix_permutation(shuffled, new_id, bi, bi_perm), lexsorted(shuffled, new_id))


def test_bad_ids_are_refused():
    rng = np.random.default_rng(1)
    uni, bi = model_orders(rng, 10, [40])
    new_id = permutation(rng, 10)
    perm = lexsorted(bi, new_id)
    with pytest.raises(ValueError):
        _renumber.suffix_permutation(np.array([[3, 10]], np.int32), new_id)
    with pytest.raises(ValueError):
        _renumber.suffix_permutation(np.array([[-1, 2]], np.int32), new_id)
    with pytest.raises(ValueError):
        _renumber.suffix_permutation(bi, np.array([0, 1, 10] + list(range(3, 10)), np.int32))
    tri = np.ascontiguousarray(np.column_stack([np.zeros(len(bi), np.int32), bi]))
    for bad in (perm + 1, -perm - 1, np.zeros_like(perm), perm[:-1]):
        with pytest.raises(ValueError):
            _renumber.suffix_permutation(tri, new_id, bi, np.ascontiguousarray(bad))
    lp = np.zeros(len(bi), np.float32)
    for bad in (perm + 1, -perm - 1):
        with pytest.raises(ValueError):
            _renumber.pack_records(bi, lp, None, bad, new_id)
        with pytest.raises(ValueError):
            _renumber.gather_rows(bi, bad, new_id)
    with pytest.raises(ValueError):
        _renumber.pack_records(bi, lp, None, perm, new_id[:5])
    with pytest.raises(ValueError):
        _renumber.gather_rows(bi, perm, new_id[:5])


@pytest.mark.parametrize("n,k", [(0, 2), (1, 1), (333, 3), (1000, 5)])
def test_records_are_numpys(n, k):
    rng = np.random.default_rng(n)
    ids = rng.integers(0, 50, (n, k)).astype(np.int32)
    lp = rng.normal(size=n).astype(np.float32)
    bo = rng.normal(size=n).astype(np.float32)
    new_id = permutation(rng, 50)
    perm = rng.permutation(n).astype(np.int64)
    want = np.empty(n, dtype=intermediate.record_dtype(k))
    want["w"], want["p"], want["b"] = new_id[ids[perm]], lp[perm], bo[perm]
    assert _renumber.pack_records(ids, lp, bo, perm, new_id).tobytes() == want.tobytes()
    want["w"], want["p"], want["b"] = ids, lp, 0.0
    assert _renumber.pack_records(ids, lp).tobytes() == want.tobytes()
    assert np.array_equal(_renumber.gather_rows(ids, perm, new_id), new_id[ids[perm]])


def test_renumbered_tables_are_lexsorted(tmp_path):
    """Renumbering an estimated model: every order in suffix order of the new ids,
    the same n-grams with the same values."""
    text = tmp_path / "t.txt"
    zipf_text(text, 3, words=200, sentences=300, longest=12)
    model = estimate(str(text), 4, progress=False)
    numbering = intermediate.Renumbering(model)
    out = intermediate.renumbered(model, numbering)
    assert out.vocab[0] == "<unk>" and sorted(out.vocab) == sorted(model.vocab)
    new_id = numbering.new_id
    for k in range(4):
        perm = lexsorted(model.ids[k], new_id)
        assert np.array_equal(out.ids[k], new_id[model.ids[k][perm]])
        assert np.array_equal(out.logprob[k], model.logprob[k][perm])
        assert np.array_equal(out.backoff[k], model.backoff[k][perm])


@pytest.mark.parametrize("bad_order", [1, 2])
def test_a_failed_write_leaves_no_file(tmp_path, bad_order):
    """An order that cannot be written (a word id outside the vocabulary, found by the
    renumbering or by the writing thread) fails the write, and no file is left."""
    text = tmp_path / "t.txt"
    zipf_text(text, 4, words=100, sentences=200, longest=10)
    model = estimate(str(text), 3, progress=False)
    intermediate.write(tmp_path / "good", model, numbering=intermediate.Renumbering(model))
    assert intermediate.read(tmp_path / "good")[0][0] == b"<unk>"
    numbered = intermediate.Renumbering(model)
    for k in range(3):
        numbered.perm(k)            # (the writing thread meets the bad id)
    model.ids[bad_order] = model.ids[bad_order].copy()
    model.ids[bad_order][-1, 0] = len(model.vocab)
    for numbering in (intermediate.Renumbering(model), numbered):
        with pytest.raises(ValueError):
            intermediate.write(tmp_path / "bad", model, numbering=numbering)
    assert sorted(p.name for p in tmp_path.iterdir() if "bad" in p.name) == []
