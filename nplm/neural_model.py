"""Querying neural models through the kenlm API, with every normalisation strategy.

``nplm.Model("m.nplm", normalization=...)`` builds a ``NeuralCore`` (nplm/_nquery.pyx)
over the network's mapped arrays:

* ``exact``: the full softmax, its normaliser computed with BLAS.  For class- and
  tree-output models it is exact through the factorisation (``class`` / ``tree``
  name the same thing).
* ``unnormalized``: the self-normalised score as it is (an NCE-trained model's
  log-normaliser is taken as 0; Vaswani et al. 2013, Devlin et al. 2014).
* ``fallback``: precomputed normalisers of frequent contexts (Zamora-Martinez et al.,
  Fallback V-NNLM section 2.2).  A query uses the longest stored context, replacing
  the farthest words by ``<null>``, and reports that order as ``ngram_length``.
  Tables come from ``precompute()`` / ``nplm precompute``.

States hold the last n-1 words (most recent first); ``ngram_length`` is the number of
context words used + 1.  Words outside the vocabulary score as ``<unk>`` (oov=True).
"""
import numpy as np

from . import _kernels, _nquery
from .errors import FormatError
from .formats import container
from .neural import KIND, NeuralNet, _ACT, _CTX, _OUT
from .vocab import BOS, EOS, NULL, UNK

NORMALIZATIONS = ("exact", "class", "tree", "unnormalized", "fallback")
# Precompute the first-layer products T[j, w] = emb[w] C_j while they take at most
# this many bytes (Devlin et al.'s trick; a 10k vocabulary, 4 positions and 750 units
# need 120 MB).
PRECOMPUTE_BYTES = 512 << 20
FALLBACK_MULTIPLIER = 1.5


def resolve_mode(net, normalization):
    """Kernel mode and display name for a requested normalisation."""
    out = net.config.output
    best = {"softmax": "exact", "class": "class", "tree": "tree"}[out]
    if normalization is None:
        return _nquery.MODES["exact"], best
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, not {normalization!r}")
    if normalization in ("class", "tree") and out != normalization:
        raise ValueError(f"normalization {normalization!r} needs a {normalization}-output model; "
                         f"this one has {out} output (use 'exact')")
    if normalization == "fallback" and out != "softmax":
        raise ValueError("fallback normalisers apply to softmax-output models; "
                         f"{out} output is normalised exactly and cheaply (use 'exact')")
    if normalization in ("exact", "class", "tree"):
        return _nquery.MODES["exact"], best
    return _nquery.MODES[normalization], normalization


def _dims(net):
    d = net.dims()
    return {k: int(d[k]) for k in ("V", "m", "d", "r0", "h1", "h2", "n_dense", "r", "C", "ctx_kind", "act",
                                   "out_kind", "max_len")}


def first_layer_table(net):
    """(m, V, r0) float32 products emb @ C_j, or None when too big / not a full context."""
    c = net.config
    if c.context != "full":
        return None
    V, m, d = len(net.vocab), c.order - 1, c.embedding_dim
    r0 = net.params["ctx"].shape[1]
    if m * V * r0 * 4 > PRECOMPUTE_BYTES:
        return None
    emb = np.asarray(net.params["emb"])
    ctx = np.asarray(net.params["ctx"]).reshape(m, d, r0)
    return np.ascontiguousarray(np.matmul(emb[None, :, :], ctx), dtype=np.float32)


def _fallback_tables(arrays, m):
    if "fallback.0.keys" not in arrays:
        return None
    tables = []
    for k in range(m + 1):
        keys, vals = arrays.get(f"fallback.{k}.keys"), arrays.get(f"fallback.{k}.vals")
        if keys is None or vals is None or keys.dtype != np.uint64 or vals.dtype != np.float32 \
                or keys.shape != vals.shape or keys.ndim != 1:
            raise FormatError(f"malformed fallback normaliser table for order {k + 1}")
        tables.append((keys, vals))
    return tables


class NeuralData:
    """What nplm.Model attaches for a neural model."""

    def __init__(self, net, core, vocab, name, arrays):
        self.net = net
        self.core = core
        self.vocab = vocab
        self.normalization = name
        self.arrays = arrays


def load(path, normalization=None, cache_size=4096):
    net, c = NeuralNet.load(path, return_container=True)
    mode, name = resolve_mode(net, normalization)
    fallback = _fallback_tables(c.arrays, net.order - 1)
    if name == "fallback" and fallback is None:
        raise FormatError("no fallback normaliser tables in this model: run "
                          "`nplm precompute MODEL --text TRAIN --min-count C` first", path)
    core = _nquery.NeuralCore(_dims(net), dict(net.params), dict(net.structs), mode,
                              first_layer_table(net), fallback, cache_size)
    words = list(net.vocab.words)
    vocab = _kernels.Vocab(*_kernels.build_vocab_arrays(words, unreachable=("<null>",)))
    return NeuralData(net, core, vocab, name, c.arrays)


# --- batched scoring --------------------------------------------------------------


def sentence_items(model, sentences, bos=True, eos=True):
    """Contexts (N, m), targets (N,), real-context lengths (N,), OOV flags and
    per-sentence item offsets for a list of sentences, as the network sees them."""
    vocab = model.vocab
    m = model.order - 1
    pad = [NULL] * m
    pieces, targets, ctx_len, offsets = [], [], [], [0]
    pos = 0
    for s in sentences:
        ids = vocab.ids(s.split() if isinstance(s, str) else s.split()).tolist()
        if eos:
            ids.append(EOS)
        start = pad[:-1] + [BOS] if bos else pad
        seq = start + ids
        pieces.append(np.asarray(seq, np.int32))
        n = len(ids)
        base = pos + m
        targets.extend(range(base, base + n))
        known = (1 if bos else 0)
        ctx_len.extend(min(known + i, m) for i in range(n))
        pos += len(seq)
        offsets.append(offsets[-1] + n)
    if not pieces:
        return (np.zeros((0, m), np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32),
                np.zeros(0, bool), np.asarray(offsets, np.int64))
    flat = np.concatenate(pieces)
    tpos = np.asarray(targets, np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(flat, m)
    contexts = np.ascontiguousarray(windows[tpos - m])
    words = np.ascontiguousarray(flat[tpos])
    oov = words == UNK
    if eos:
        ends = np.asarray(offsets[1:], np.int64) - 1
        oov[ends[ends >= 0]] = False
    return contexts, words, np.asarray(ctx_len, np.int32), oov, np.asarray(offsets, np.int64)


def batch_log10(model, contexts, words, ctx_len):
    """log10 probabilities and n-gram lengths of (context, word) rows in the model's mode."""
    core = model.core
    if model.normalization == "fallback":
        ks, zs = core.fallback_orders(contexts)
        trunc = contexts.copy()
        m = contexts.shape[1]
        cols = np.arange(m)[None, :]
        trunc[cols < (m - ks)[:, None]] = NULL
        missing = np.isnan(zs)
        if missing.any():
            zs[missing] = core.softmax_logz(trunc[missing])
        lp = core.log_probs(trunc, words, softmax_logz=zs)
        lengths = ks + 1
    else:
        lp = core.log_probs(contexts, words)
        lengths = ctx_len + 1
    return lp / np.log(10.0), lengths


# --- fallback normaliser tables -----------------------------------------------------


def _hash_table(keys, vals):
    """Open-addressing arrays (keys uint64, vals float32) for fallback lookups."""
    n = len(keys)
    nb = max(int(n * FALLBACK_MULTIPLIER) + 1, n + 1)
    tk = np.zeros(nb, np.uint64)
    tv = np.zeros(nb, np.float32)
    slot = ((keys.astype(object) * nb) >> 64).astype(np.int64) if n else np.zeros(0, np.int64)
    for key, val, b in zip(keys.tolist(), vals.tolist(), slot.tolist()):
        while tk[b] != 0:
            b += 1
            if b == nb:
                b = 0
        tk[b] = key
        tv[b] = val
    return tk, tv


def precompute(path, text, min_count=2, out=None, progress=True):
    """Store exact softmax normalisers of the contexts seen at least ``min_count``
    times in ``text`` at every order (the one-word table covers every word, and the
    empty context is always stored), so ``normalization="fallback"`` can use them.
    Rewrites ``path`` (or writes ``out``) atomically.  Returns per-order table sizes."""
    from collections import Counter

    from .textio import open_text, same_file
    net, c = NeuralNet.load(path, return_container=True)
    if net.config.output != "softmax":
        raise ValueError("fallback normalisers apply to softmax-output models only")
    if min_count < 1:
        raise ValueError(f"min-count must be at least 1, not {min_count}")
    m = net.order - 1
    core = _nquery.NeuralCore(_dims(net), dict(net.params), dict(net.structs), 0,
                              first_layer_table(net), None, 16)
    vocab = net.vocab
    counts = [Counter() for _ in range(m + 1)]
    with open_text(text) as f:
        for line in f:
            ids = [BOS] + [vocab.id(w) for w in line.split()] + [EOS]
            for t in range(1, len(ids)):
                for k in range(1, min(t, m) + 1):
                    counts[k][tuple(ids[t - k:t])] += 1
    sizes = []
    arrays = {}
    it = range(m + 1)
    if progress:
        from tqdm import tqdm
        it = tqdm(it, desc="normalisers", unit="order")
    for k in it:
        if k == 0:
            ctxs = [()]
        elif k == 1:
            ctxs = [(w,) for w in range(len(vocab)) if w != NULL]
        else:
            ctxs = [h for h, cnt in counts[k].items() if cnt >= min_count]
        full = np.full((len(ctxs), m), NULL, np.int32)
        for i, h in enumerate(ctxs):
            if k:
                full[i, m - k:] = h
        z = core.softmax_logz(full) if len(ctxs) else np.zeros(0)
        keys = np.array([_nquery.context_key(row[m - k:]) for row in full], dtype=np.uint64)
        tk, tv = _hash_table(keys, z.astype(np.float32))
        arrays[f"fallback.{k}.keys"] = tk
        arrays[f"fallback.{k}.vals"] = tv
        sizes.append(len(ctxs))
    target = out or path
    if out is not None and same_file(out, path):
        target = path
    config = dict(c.config)
    config["fallback"] = {"min_count": int(min_count), "contexts": sizes}
    all_arrays = {k: np.asarray(v) for k, v in c.arrays.items() if not k.startswith("fallback.")}
    all_arrays.update(arrays)
    container.write(target, KIND, config, all_arrays)
    return sizes
