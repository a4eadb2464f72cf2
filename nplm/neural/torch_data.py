"""Streaming, sharded training examples for the PyTorch engine (nplm.neural.torch_engine).

Many text files (plain or gzip/bzip2/xz; one sentence per line) are read as one
stream of lines; line i belongs to rank ``i % world``, so each process reads its own
share and no process holds the corpus.  Examples (context, target) are made as
``nplm.neural.vocab.examples`` makes them, gathered into a bounded buffer, shuffled
there with a generator seeded by (seed, epoch, rank, buffer number) and cut into
minibatches: the order of an epoch is a function of the seed, so a run resumed
mid-epoch skips exactly the batches it had done.  Nothing here imports torch.
"""
from collections import Counter

import numpy as np

from nplm.io.text import split_words, utf8_lines
from nplm.neural.vocab import examples

SENTENCES_PER_PIECE = 4096          # sentences turned into examples at once
SHUFFLE_BUFFER = 1 << 20            # examples shuffled together


def lines(paths, rank=0, world=1, limit=None):
    """The token lists of this rank's lines of ``paths`` (every ``world``-th line from
    line ``rank`` on, over the files in order), at most ``limit`` lines of the stream."""
    i = 0
    for path in paths:
        for line in utf8_lines(path):
            if limit is not None and i >= limit:
                return
            if i % world == rank:
                yield split_words(line)
            i += 1


def count(paths, rank=0, world=1):
    """(Counter of this rank's words plus one </s> per sentence, its sentences, its
    examples): the first pass, which sizes the vocabulary and the epoch."""
    words, sentences, tokens = Counter(), 0, 0
    for s in lines(paths, rank, world):
        words.update(s)
        sentences += 1
        tokens += len(s)
    words["</s>"] += sentences
    return words, sentences, tokens + sentences


def first_targets(paths, vocab, order, limit_tokens):
    """Target ids of the stream's first sentences (all ranks' lines), up to about
    ``limit_tokens``: what Brown clustering sees."""
    out, n = [], 0
    for s in lines(paths):
        out.append(s)
        n += len(s) + 1
        if n >= limit_tokens:
            break
    return examples(out, vocab, order)[1]


def batches(paths, vocab, order, batch, *, rank=0, world=1, seed=1, epoch=0, skip=0, limit=None):
    """This rank's minibatches (contexts int32 (B, order-1), targets int32 (B,)) of
    one epoch, at most ``limit`` of them, the first ``skip`` dropped (a resumed run)."""
    done = 0
    buffer_no = 0
    carry_ctx = np.zeros((0, order - 1), np.int32)
    carry_tgt = np.zeros(0, np.int32)
    for ctx, tgt in _buffers(paths, vocab, order, rank, world):
        rng = np.random.default_rng([seed, epoch, rank, buffer_no])
        buffer_no += 1
        perm = rng.permutation(tgt.size)
        ctx = np.concatenate([carry_ctx, ctx[perm]])
        tgt = np.concatenate([carry_tgt, tgt[perm]])
        whole = tgt.size // batch * batch
        for lo in range(0, whole, batch):
            if limit is not None and done >= limit:
                return
            if done >= skip:
                yield ctx[lo:lo + batch], tgt[lo:lo + batch]
            done += 1
        carry_ctx, carry_tgt = ctx[whole:], tgt[whole:]


def _buffers(paths, vocab, order, rank, world):
    """This rank's examples in buffers of about SHUFFLE_BUFFER."""
    pieces, sentences, held = [], [], 0
    for s in lines(paths, rank, world):
        sentences.append(s)
        if len(sentences) == SENTENCES_PER_PIECE:
            pieces.append(examples(sentences, vocab, order))
            held += pieces[-1][1].size
            sentences = []
            if held >= SHUFFLE_BUFFER:
                yield _joined(pieces)
                pieces, held = [], 0
    if sentences:
        pieces.append(examples(sentences, vocab, order))
    if pieces:
        yield _joined(pieces)


def _joined(pieces):
    return np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces])
