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
A shortlist model's vocabulary is every training word: the core maps words to the
network's units and gives an out-of-shortlist word its share of the OOS unit
(nplm/neural/shortlist.py) in every mode.
"""
import numpy as np

from nplm import _kernels
from nplm.errors import FormatError
from nplm.io import container
from nplm.io.progress import tqdm
from nplm.io.resources import check_blas_room
from nplm.io.text import split_words, utf8_lines
from nplm.neural import _query as _nquery
from nplm.neural.network import KIND, NeuralNet, blas_threads, reserve_blas_buffer
from nplm.neural.vocab import BOS, EOS, NULL, UNK

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
    return {k: int(d[k]) for k in ("V", "V_in", "n_words", "m", "d", "r0", "h1", "h2", "n_dense", "r", "C",
                                   "ctx_kind", "act", "out_kind", "max_len")}


def first_layer_table(net):
    """(m, V_in, r0) float32 products emb @ C_j (V_in: the embedding rows), or None when
    too big / not a full context."""
    c = net.config
    if c.context != "full":
        return None
    V, m, d = net.n_inputs, c.order - 1, c.embedding_dim
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


def network_of(model):
    """The NeuralNet behind an nplm.Model, or None for other model kinds."""
    return getattr(getattr(model, "_data", None), "net", None)


def exact_network_of(model):
    """The NeuralNet behind a neural nplm.Model whose scores are exactly normalised
    (exact, class or tree mode), else None: the net's own batched kernels then give
    the model's scores and whole distributions."""
    net = network_of(model)
    if net is None or getattr(model, "normalization", None) not in ("exact", "class", "tree"):
        return None
    return net


def load(path, normalization=None, cache_size=4096, copy=False):
    # float32, or float16/int8 converted when first used: the core reads a float16
    # model's big matrices as they are stored (where it can), so they stay mapped
    # (``copy``: read into private memory instead, container.read)
    check_blas_room(blas_threads())     # OpenBLAS would hang, not fail, without the room
    reserve_blas_buffer()
    net, c = NeuralNet.load(path, return_container=True, lazy=True, copy=copy)
    mode, name = resolve_mode(net, normalization)
    fallback = _fallback_tables(c.arrays, net.order - 1)
    if name == "fallback" and fallback is None:
        raise FormatError("no fallback normaliser tables in this model: run "
                          "`nplm precompute MODEL --text TRAIN --min-count C` first", path)
    stored = getattr(net.params, "stored", net.params.__getitem__)
    core = _nquery.NeuralCore(_dims(net), {n: stored(n) for n in net.params}, dict(net.structs), mode,
                              first_layer_table(net), fallback, cache_size, shortlist=net.shortlist)
    words = list(net.vocab.words)
    vocab = _kernels.Vocab(*_kernels.build_vocab_arrays(words, unreachable=("<null>",)))
    return NeuralData(net, core, vocab, name, c.arrays)


# --- batched scoring --------------------------------------------------------------


def sentence_items(vocab, m, sentences, bos=True, eos=True):
    """Contexts (N, m) oldest first, targets (N,), real-context lengths (N,), OOV
    flags and per-sentence item offsets for a list of sentences (str), as the
    network sees them: before <s> (or with no <s>) the positions hold <null>.
    Built with numpy over all sentences at once: one id lookup for every token, then
    each sentence laid out as its m start positions and its items."""
    toks = [split_words(s) for s in sentences]
    n_words = np.fromiter(map(len, toks), np.int64, count=len(toks))
    n = n_words + 1 if eos else n_words                   # items per sentence
    offsets = np.zeros(len(toks) + 1, np.int64)
    np.cumsum(n, out=offsets[1:])
    N = int(offsets[-1])
    if N == 0:
        return (np.zeros((0, m), np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32),
                np.zeros(0, bool), offsets)
    ids = vocab.ids([w for t in toks for w in t])
    # sentence i occupies flat[base[i]:base[i] + m + n[i]]: the start, then its items
    base = offsets[:-1] + m * np.arange(len(toks))
    flat = np.empty(N + m * len(toks), np.int32)
    start = np.array([NULL] * (m - 1) + [BOS] if bos else [NULL] * m, np.int32)
    flat[(base[:, None] + np.arange(m)).ravel()] = np.tile(start, len(toks))
    k = np.arange(N) - np.repeat(offsets[:-1], n)          # item index within its sentence
    tpos = np.repeat(base + m, n) + k
    is_eos = k == np.repeat(n_words, n) if eos else np.zeros(N, bool)
    flat[tpos[~is_eos]] = ids
    flat[tpos[is_eos]] = EOS
    windows = np.lib.stride_tricks.sliding_window_view(flat, m)
    contexts = np.ascontiguousarray(windows[tpos - m])
    words = np.ascontiguousarray(flat[tpos])
    oov = (words == UNK) & ~is_eos
    ctx_len = np.minimum(k + (1 if bos else 0), m).astype(np.int32)
    return contexts, words, ctx_len, oov, offsets


def softmax_logz(core, net, contexts, block=512):
    """Exact log-normalisers of many contexts: the hidden states from the core, then
    (block x V) output scores by one BLAS product and numpy's vectorised exp per
    block -- an exp per vocabulary word and context is the cost that matters."""
    out_w = np.asarray(net.params["out_w"], np.float32)
    out_b = np.asarray(net.params["out_b"], np.float32)
    H = core.hidden(contexts)
    z = np.empty(len(H), np.float64)
    for lo in range(0, len(H), block):
        S = H[lo:lo + block] @ out_w.T
        S += out_b
        mx = S.max(axis=1)
        S -= mx[:, None]
        np.exp(S, out=S)
        z[lo:lo + block] = mx + np.log(S.sum(axis=1).astype(np.float64))
    return z


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
            zs[missing] = softmax_logz(core, model._data.net, trunc[missing])
        lp = core.log_probs(trunc, words, softmax_logz=zs)
        lengths = ks + 1
    else:
        # exact softmax: the core computes each block's scores by sgemm and their
        # normalisers in parallel (faster than softmax_logz's numpy passes)
        lp = core.log_probs(contexts, words)
        lengths = ctx_len + 1
    return lp / np.log(10.0), lengths


# --- fallback normaliser tables -----------------------------------------------------


def precompute(path, text, min_count=2, out=None, progress=True):
    """Store exact softmax normalisers of the contexts seen at least ``min_count``
    times in ``text`` at every order (the one-word table covers every word, and the
    empty context is always stored; with a shortlist on the input side, contexts that
    read the same embedding rows count as one), so ``normalization="fallback"`` can use them.
    Rewrites ``path`` (or writes ``out``) atomically.  Returns the number of contexts
    stored per context length 0..n-1."""
    net, c = NeuralNet.load(path, return_container=True)
    if net.config.output != "softmax":
        raise ValueError("fallback normalisers apply to softmax-output models only")
    if min_count < 1:
        raise ValueError(f"min-count must be at least 1, not {min_count}")
    m = net.order - 1
    core = _nquery.NeuralCore(_dims(net), dict(net.params), dict(net.structs), 0,
                              first_layer_table(net), None, 16, shortlist=net.shortlist)
    lines = [line.rstrip("\n") for line in utf8_lines(text)]   # invalid UTF-8: an error naming the line
    if not any(split_words(line) for line in lines):
        raise FormatError("the text has no words: no contexts to store normalisers for", text)
    contexts, _, ctx_len, _, _ = sentence_items(net.vocab, m, lines)
    V = len(net.vocab)
    stages = range(m + 1)
    if progress:
        stages = tqdm(stages, desc="normalisers", unit="order")
    sizes, arrays = [], {}
    for k in stages:
        if k == 0:
            rows = np.full((1, m), NULL, np.int32)
        elif k == 1:
            # one word per embedding row (a shortlist's input side reads every
            # out-of-shortlist word as one row)
            words = np.array([w for w in range(V) if w != NULL], np.int32)
            _, first = np.unique(net.input_ids(words), return_index=True)
            rows = np.full((len(first), m), NULL, np.int32)
            rows[:, -1] = words[np.sort(first)]
        else:
            cand = contexts[ctx_len >= k]
            keys = _nquery.context_keys(net.input_ids(cand), k)
            _, first, counts = np.unique(keys, return_index=True, return_counts=True)
            rows = cand[first[counts >= min_count]].copy()
            rows[:, :m - k] = NULL
        z = softmax_logz(core, net, rows) if len(rows) else np.zeros(0)
        # keyed by the network's input rows, as a query looks them up
        tk, tv = _nquery.build_key_table(_nquery.context_keys(net.input_ids(rows), k), z, FALLBACK_MULTIPLIER)
        arrays[f"fallback.{k}.keys"] = tk
        arrays[f"fallback.{k}.vals"] = tv
        sizes.append(len(rows))
    config = dict(c.config)
    config["fallback"] = {"min_count": int(min_count), "contexts": sizes}
    all_arrays = {k: np.asarray(v) for k, v in c.arrays.items() if not k.startswith("fallback.")}
    all_arrays.update(arrays)
    container.write(out or path, KIND, config, all_arrays)
    return sizes
