"""estimate(collapse_values=True), lmplz's --collapse_values: one value q per n-gram
whose sums over a sentence are the probability-and-back-off model's sentence log10
probabilities; KenLM's own bytes are compared in tests/cli/test_kenlm_intermediate.py."""

import numpy as np
import pytest

from nplm.backoff.estimate import estimate


def table(model):
    return {tuple(model.vocab[w] for w in row): (float(p), float(b))
            for ids, lp, bo in zip(model.ids, model.logprob, model.backoff)
            for row, p, b in zip(ids.tolist(), lp, bo)}


def score_pb(t, words, order):
    total = 0.0
    for i in range(1, len(words)):
        ctx = words[max(0, i - order + 1):i]
        backoff = 0.0
        while (tuple(ctx) + (words[i],)) not in t:
            if tuple(ctx) in t:
                backoff += t[tuple(ctx)][1]
            ctx = ctx[1:]
        total += t[tuple(ctx) + (words[i],)][0] + backoff
    return total


def score_q(t, words, order):
    # <s> scored too: its q is its back-off, which the first word's context charges
    total = t[("<s>",)][0]
    for i in range(1, len(words)):
        ctx = words[max(0, i - order + 1):i]
        while (tuple(ctx) + (words[i],)) not in t:
            ctx = ctx[1:]
        total += t[tuple(ctx) + (words[i],)][0]
    return total


@pytest.mark.parametrize("order,prune", [(1, None), (2, None), (3, None), (4, [0, 1, 1])])
def test_q_gives_the_sentence_probabilities(tmp_path, order, prune):
    rng = np.random.default_rng(order)
    p = 1.0 / np.arange(1, 201)
    lines = [" ".join(f"w{w}" for w in rng.choice(200, size=int(rng.integers(2, 12)), p=p / p.sum()))
             for _ in range(300)]
    text = tmp_path / "t.txt"
    text.write_text("\n".join(lines) + "\n")
    pb = estimate(str(text), order, prune=prune, progress=False)
    q = estimate(str(text), order, prune=prune, progress=False, collapse_values=True)
    assert [len(x) for x in q.logprob] == [len(x) for x in pb.logprob]
    assert all(not b.any() for b in q.backoff)
    tp, tq = table(pb), table(q)
    for line in lines[:100] + ["w1 w199 w3 w2 w1", "w7"]:
        words = ["<s>"] + [w if (w,) in tp else "<unk>" for w in line.split()] + ["</s>"]
        assert score_q(tq, words, order) == pytest.approx(score_pb(tp, words, order), abs=1e-4)


def test_q_is_refused_where_it_cannot_be_written(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("a b c\nb c a\n")
    with pytest.raises(ValueError, match="collapse_values"):
        estimate(str(text), 2, binary=str(tmp_path / "m.bin"), discount_fallback=True, progress=False,
                 collapse_values=True)
