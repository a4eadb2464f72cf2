"""Interpolated language models: several models used as one, with the kenlm API.

``interpolate(models, weights, mode)`` mixes any nplm models (back-off, neural, or
other mixtures), model paths, and real ``kenlm.Model`` objects:

* ``mode="linear"``:  p(w|h) = sum_i l_i p_i(w|h).  Components must be normalised.
* ``mode="loglinear"``: log10 p(w|h) = sum_i l_i log10 p_i(w|h) - log10 Z(h), where
  Z(h) sums the numerator over the union vocabulary without <s> (as KenLM's
  ``interpolate``); it is computed once per context and cached.  With
  ``normalize=False`` the Z term is left out: the weighted feature sum a decoder
  uses, which is not a probability.

Vocabularies may differ: the mixture's vocabulary is the union of the components'
(in component order; ids no word reaches, such as a neural model's <null>, are left
out).  Probability a component gives to such unreachable ids, and to <s> (a
softmax's share; back-off models give <s> none), is not part of the mixture's
distribution.  A word one component does not know gets:

* ``unknown="split"`` (the default): an even share of that component's <unk>
  probability, divided among the union's words it lacks (the union's <unk>
  included).  Every component, and so the mixture, stays normalised over the union
  vocabulary.  With equal vocabularies nothing is divided: this is KenLM's rule.
* ``unknown="unk"`` (KenLM's rule applied to every word): that component's whole
  <unk> probability, once per word it lacks.  A linear mixture is then not
  normalised (a KN3 + a min-count-2 network lacking 1,935 of its 7,185 words sums to
  66 after <s>), and its dev perplexity is falsely low: such a linear mixture warns
  when built and ``tune`` refuses it unless given ``allow_unnormalised=True``.  A
  normalised log-linear mixture is renormalised by Z, but the missing words' large
  numerators take mass from the words the component knows.

With ``bucket_by=i`` (linear only) the weights depend on the context: one row per
length of the state model i keeps for it (0 .. order-1: for a back-off model, KenLM's
state, the longest suffix of the context it lists as a context) and one for the
sentence start alone.  With ``bucket_bins=k`` each length 1 .. order-1 is split
further into k bins of the log10 back-off weight of that longest context (the mass
the model leaves to shorter contexts there: large where it has seen few distinct
continuations); ``tune`` puts the bin edges at the dev text's quantiles.  A back-off
model knows how much of the context it has seen, so the mixture can trust it more
where it has seen more (count-bucketed weights, as SRILM's context-dependent
mixtures).  The weights depend on the context only, so the mixture stays normalised.

Weights are tuned on a development text: EM for linear mixtures, Newton's method on
the exact normalised log-linear likelihood (gradient = expected minus observed
log-probabilities, Hessian = their covariance; as KenLM's tuning) for log-linear ones.  A mixture saves as a small JSON spec that
``nplm.Model(path)`` loads.

A ``kenlm.Model`` component is scored through kenlm itself, which needs the GIL: a
mixture containing one does not score in parallel.  kenlm cannot list its
vocabulary: where its ``path`` is an ARPA file (plain or compressed) its words are
read from the file's unigrams (only that section), giving the union the same ARPA
gives as a path, and a KenLM binary gives the words stored in it; one built without
them (``build_binary -v``) adds no words (a warning says so), and words only it knows
must be passed in ``vocab=`` (otherwise they are <unk> to the mixture).
"""
import json
import math
import os
import sys
import threading
import warnings

import numpy as np

from nplm import _kernels
from nplm.backoff._query import BackoffCore
from nplm.backoff.kenlm import reader as kenlm_binary
from nplm.compose import _interp
from nplm.errors import FormatError, content_hidden
from nplm.io.atomic import atomic_write
from nplm.io.files import SNIFF_BYTES, kind_of_head, open_binary
from nplm.io.text import split_words, utf8_lines
from nplm.model import Model, quiet_config, register_file_kind
from nplm.neural.query import exact_network_of
from nplm.neural.vocab import NULL

SPEC_KEY = "interpolation"
SPEC_VERSION = 1
SPEC_VERSION_BUCKETED = 2       # weights per context bucket ("bucket_by"); 1 reads as before
MAX_BINS = _interp.BINS_MAX     # back-off weight bins per context length
MODES = ("linear", "loglinear")
UNKNOWN = ("unk", "split")
_UNK = ("<unk>", "<UNK>")
# Largest sum-to-one error tolerated in a component used linearly (float32 tables
# give ~1e-6; an unnormalised model is off by far more).
NORMALISED_TOLERANCE = 1e-3
LOG10E = 1.0 / math.log(10.0)


class _Component:
    """One component: its scorer, its word -> id function, and where it came from."""

    def __init__(self, model, core, words, path, is_kenlm, owner):
        self.model = model
        self.core = core
        self.words = words          # its vocabulary in id order (None for kenlm)
        self.path = path
        self.is_kenlm = is_kenlm
        self.owner = owner          # keeps the loaded model alive


def _is_kenlm(obj):
    return type(obj).__module__ == "kenlm" and hasattr(obj, "BaseFullScore")


def _component(obj, config):
    if isinstance(obj, (str, bytes, os.PathLike)):
        name = os.fsdecode(obj)
        return _Component(None, None, None, os.path.abspath(name), False, _component_model(name, config))
    if isinstance(obj, dict):           # a spec entry: {"path": ..., "normalization": ...}
        name = obj["path"]
        model = _component_model(name, config, obj.get("normalization"))
        return _Component(None, None, None, os.path.abspath(name), False, model)
    if _is_kenlm(obj):
        path = os.fsdecode(obj.path)
        return _Component(obj, None, _arpa_unigrams(path, obj), path, True, obj)
    if isinstance(obj, _kernels.ModelBase):
        path = None if isinstance(obj, InterpolatedModel) else getattr(obj, "path", None)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        return _Component(None, None, None, path, False, obj)
    raise TypeError(f"cannot interpolate a {type(obj).__name__}: expected an nplm model, "
                    "a model path or a kenlm.Model")


def _arpa_unigrams(path, model):  # noqa: C901 - reads the ARPA header's grammar up to the unigrams
    """The words of a kenlm.Model read from its file's \\1-grams: section when that
    file is an ARPA file (plain or compressed; nothing past that section is read),
    in file order, each checked with ``in``; for a KenLM binary the words it stores;
    None for one without them or a file that cannot be read (kenlm itself cannot
    list its vocabulary)."""
    try:
        f = open_binary(path)
    except OSError:
        return None
    words = []
    try:
        with f:
            line = b""
            for line in f:
                if line.strip():
                    break
            if line.strip() != b"\\data\\":
                return _kenlm_binary_words(path, model)
            for line in f:
                if line.strip() == b"\\1-grams:":
                    break
            else:
                return None
            for line in f:
                fields = line.split(b"\t") if b"\t" in line else line.split()
                if not line.strip() or line.startswith(b"\\"):
                    break
                if len(fields) >= 2:
                    words.append(fields[1].strip(b" \r\n"))
    except (OSError, EOFError, ValueError):
        return None
    out = []
    for w in words:
        try:
            w = w.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if w not in _UNK and w in model:
            out.append(w)
    return out


def _kenlm_binary_words(path, model):
    """The words stored in a KenLM binary (in id order, <unk> left out), or None for
    one without them, or a file that is not one."""
    try:
        words = kenlm_binary.load(path, kenlm_binary.LAZY).vocab.words()
    except (OSError, ValueError):
        return None
    return [w for w in words[1:] if w not in _UNK and w in model]


def _union_vocab(comps, extra):
    """Union vocabulary, <unk> first, then each component's words in its id order."""
    words = ["<unk>"]
    seen = set(words)
    for c in comps:
        if c.is_kenlm:
            for w in c.words or ():     # its ARPA file's unigrams, if it has one
                if w not in seen:
                    seen.add(w)
                    words.append(w)
            continue
        own = c.owner.vocab.words()
        # Only words that look up to themselves: padding such as a neural model's
        # <null> is an id no text can reach, so it is not a word of the mixture.
        reachable = c.owner.vocab.ids(own) == np.arange(len(own))
        for w, ok in zip(own[1:], reachable[1:]):
            if ok and w not in seen and w not in _UNK:
                seen.add(w)
                words.append(w)
    for w in extra or ():
        if w not in seen and w not in _UNK:
            seen.add(w)
            words.append(w)
    return words


# Neural normalisation strategies that do not give probabilities summing to one
# in every context (nplm/neural_model.py).
_UNNORMALISED = ("unnormalized", "fallback")


def _is_normalised_flag(model):
    """A component's own statement about normalisation, if it makes one."""
    if getattr(model, "normalization", None) in _UNNORMALISED:
        return False
    for obj in (model, getattr(model, "core", None), getattr(model, "_data", None)):
        for name in ("normalized", "normalised"):
            v = getattr(obj, name, None)
            if isinstance(v, (bool, np.bool_)):
                return bool(v)
    return None


def _check_normalised(c, index):
    """Refuse an unnormalised component of a linear mixture: by its own flag, and by
    summing its distribution after <s> over its vocabulary (without <s>)."""
    name = c.path or f"component {index}"
    if c.is_kenlm:
        return                      # kenlm back-off models are normalised by construction
    flag = _is_normalised_flag(c.owner)
    total = None
    if flag is None or flag:
        st = _kernels.State()
        c.owner.BeginSentenceWrite(st)
        p = np.power(10.0, c.owner.log10_distribution(st).astype(np.float64))
        total = float(p.sum())
        # Back-off models give <s> probability 1 (it is never predicted); neural
        # softmaxes include it in their normalisation.  Either sum may be the one.
        without_bos = total - float(p[c.owner.vocab.id("<s>")])
        if abs(without_bos - 1.0) < abs(total - 1.0):
            total = without_bos
    if flag is False or abs(total - 1.0) > NORMALISED_TOLERANCE:
        detail = (f"normalization={getattr(c.owner, 'normalization', None)!r}" if flag is False
                  else f"p(w | <s>) sums to {total:.6g}")
        raise ValueError(f"component {index} ({name}) is not normalised ({detail}); linear "
                         "interpolation needs normalised models: use mode='loglinear'")


def _distribution_provider(model):
    """A function computing a component's whole distribution for a batch of
    contexts in one go, where one exists: a neural model with exact normalisation
    (its hidden states from the query core, then the output layer as matrix
    products instead of one score_word call per word).  None otherwise."""
    net = exact_network_of(model)
    if net is None:
        return None
    m = net.order - 1
    core = model.core
    kind = net.config.output
    # The net's evaluation engine (tree output) has one set of work buffers and its
    # kernels release the GIL: threads scoring the mixture take turns.
    lock = threading.Lock()
    par = {k: np.asarray(net.params[k], dtype=np.float64) for k in ("out_w", "out_b", "cls_w", "cls_b")}
    if kind == "class":
        start = np.asarray(net.structs["class_start"], dtype=np.int64)
        sizes = np.diff(start)
        pos_class = np.repeat(np.arange(len(sizes)), sizes)          # class of each output row
        nonempty = np.flatnonzero(sizes > 0)
        word_pos = np.asarray(net.structs["word_pos"], dtype=np.int64)

    def log_softmax_rows(x):
        mx = x.max(axis=1, keepdims=True)
        return x - (mx + np.log(np.exp(x - mx).sum(axis=1, keepdims=True)))

    def provide(words, lengths):
        # The net's input as NeuralCore builds it: oldest first, <null>-padded.
        ctx = np.full((len(lengths), m), NULL, dtype=np.int32)
        for k in range(m):
            rows = lengths > k
            ctx[rows, m - 1 - k] = words[rows, k]
        if kind == "tree":
            with lock:
                return net.log10_distribution(ctx)
        h = core.hidden(ctx).astype(np.float64)
        ws = h @ par["out_w"].T + par["out_b"]
        # (over the net's output units: word_scores gives the words' scores, each
        # out-of-shortlist word its unit's share)
        if kind == "softmax":
            return net.word_scores(log_softmax_rows(ws), LOG10E)
        lc = log_softmax_rows(h @ par["cls_w"].T + par["cls_b"])
        mx = ws.max(axis=1, keepdims=True)
        lse = np.zeros((len(ws), len(sizes)))
        lse[:, nonempty] = np.log(np.add.reduceat(np.exp(ws - mx), start[nonempty], axis=1)) + mx
        by_pos = ws - lse[:, pos_class] + lc[:, pos_class]
        return net.word_scores(by_pos[:, word_pos], LOG10E)
    return provide


def _mode_code(mode, normalize):
    if mode not in MODES:
        raise ValueError(f"unknown interpolation mode {mode!r} (expected one of {', '.join(MODES)})")
    if mode == "linear":
        return _interp.LINEAR
    return _interp.NORMALISED if normalize else _interp.LOGLINEAR


def _check_weights(weights, n, mode, rows=None):
    """Weights as float64 (n,), or (rows, n) for a bucketed mixture (a flat vector
    then serves every bucket)."""
    if weights is None:
        w = np.full(n, 1.0 / n)
        return w if rows is None else np.tile(w, (rows, 1))
    w = np.asarray(weights, dtype=np.float64)
    if rows is None:
        w = w.ravel()
        if len(w) != n:
            raise ValueError(f"{len(w)} weights for {n} models")
        return _check_row(w, mode)
    if w.ndim == 1:
        w = np.tile(w, (rows, 1))
    if w.ndim != 2 or w.shape != (rows, n):
        raise ValueError(f"weights of shape {np.shape(weights)}: a bucketed mixture of {n} models "
                         f"takes {n} weights, or {rows} rows of them (one per context bucket)")
    return np.array([_check_row(r, mode, f"bucket {b}: ") for b, r in enumerate(w)])


def _check_row(w, mode, where=""):
    # (w.tolist(): plain floats in messages, not numpy's np.float64(...) reprs)
    if not np.all(np.isfinite(w)):
        raise ValueError(f"{where}weights must be finite, got {w.tolist()}")
    if mode == "linear":
        if np.any(w < 0):
            raise ValueError(f"{where}linear weights must be non-negative, got {w.tolist()}")
        if abs(w.sum() - 1.0) > 1e-4:
            raise ValueError(f"{where}linear weights must sum to 1, got {w.tolist()} (sum {w.sum():.9g})")
        w = w / w.sum()         # rounded weights (1/3 written as 0.3333) made exact
    if not np.any(w != 0):
        raise ValueError(f"{where}at least one weight must be non-zero")
    return w


class InterpolatedModel(_kernels.ModelBase):
    """Several language models used as one, with the whole kenlm.Model API (see the
    module docstring).  All scores are log10."""

    def __init__(self, models, weights=None, mode="linear", *, normalize=True, unknown="split",  # noqa: C901 - validates each constructor option with its own message
                 vocab=None, config=None, cache_entries=65536, fast_distributions=True,
                 bucket_by=None, bucket_bins=1, bucket_edges=None):
        if config is None:
            config = quiet_config()
        models = list(models)
        if not models:
            raise ValueError("interpolate needs at least one model")
        if unknown not in UNKNOWN:
            raise ValueError(f"unknown={unknown!r}: expected one of {', '.join(UNKNOWN)}")
        code = _mode_code(mode, normalize)
        self._comps = [_component(m, config) for m in models]
        self.bucket_by, self.bucket_bins, self._rows, self._edges = None, 1, None, None
        if bucket_by is not None:
            self._set_buckets(bucket_by, bucket_bins, bucket_edges, mode)
        elif bucket_bins != 1 or bucket_edges is not None:
            raise ValueError("bucket_bins and bucket_edges need bucket_by")
        self._weights = _check_weights(weights, len(models), mode, self._rows)
        self.mode = mode
        self.normalize = bool(normalize) if mode == "loglinear" else True
        self.unknown = unknown
        self.extra_vocab = list(vocab) if vocab is not None else []
        for i, c in enumerate(self._comps):
            if c.is_kenlm and c.words is None and vocab is None:
                warnings.warn(f"component {i} is a kenlm.Model of a KenLM binary ({c.path}) that does "
                              "not store its words (build_binary -v), whose vocabulary kenlm cannot "
                              "list: words only it knows are unknown to the mixture unless given in "
                              "vocab=", stacklevel=3)
        words = _union_vocab(self._comps, self.extra_vocab)
        for special in ("<s>", "</s>"):
            if special not in words:
                raise ValueError(f"the union vocabulary has no {special}: a mixture of only kenlm.Model "
                                 "components of KenLM binaries needs vocab= (kenlm cannot list its words)")
        self._words = words
        union = _kernels.Vocab(*_kernels.build_vocab_arrays(words))
        bos, eos = union.id("<s>"), union.id("</s>")
        maps = np.zeros((len(self._comps), len(words)), dtype=np.int32)
        cores = []
        for i, c in enumerate(self._comps):
            if c.is_kenlm:
                known = [w for w in words[1:] if w in c.owner]
                cwords = ["<unk>"] + known
                index = {w: k for k, w in enumerate(cwords)}
                maps[i] = [index.get(w, 0) for w in words]
                cores.append(_interp.KenlmCore(c.owner, cwords, index["<s>"], index["</s>"]))
            else:
                maps[i] = c.owner.vocab.ids(words)
                maps[i, 0] = 0
                cores.append(c.owner.core)
            if mode == "linear":
                _check_normalised(c, i)
        # Words each component does not know (the union's <unk> included).
        self._unknown_counts = (maps == 0).sum(axis=1)
        pen = np.zeros(len(self._comps), dtype=np.float32)
        if unknown == "split":
            pen[:] = -np.log10(self._unknown_counts)
        providers = [None if c.is_kenlm or not fast_distributions else _distribution_provider(c.owner)
                     for c in self._comps]
        sizes = [len(c.owner.vocab) if p is not None else 0 for c, p in zip(self._comps, providers)]
        first = self._weights if self._rows is None else self._weights[0]
        core = _interp.InterpolatedCore(cores, maps, first, code, pen, bos, eos,
                                        cache_entries, any(c.is_kenlm for c in self._comps),
                                        providers, sizes)
        if self._rows is not None:
            core.set_weights(self._weights, self.bucket_by, self._edges)
        self._maps = maps
        mapped = [m for c in self._comps if not c.is_kenlm for m in getattr(c.owner, "_mapped", ())]
        self._attach(core, union, mapped)
        self.path = b"<interpolation>"
        self._unnormalised = None
        if unknown == "unk" and mode == "linear" and np.any(self._unknown_counts > 1):
            self._unnormalised = self._unk_rule_excess()
            warnings.warn(self._unnormalised, stacklevel=3)

    def _unk_rule_excess(self):
        """What unknown='unk' does to a linear mixture of different vocabularies, in
        words: how many words each component lacks and the sum after <s>."""
        st = _kernels.State()
        self.BeginSentenceWrite(st)
        p = np.power(10.0, self.log10_distribution(st).astype(np.float64))
        total = float(p.sum() - p[self.vocab.id("<s>")])
        lacks = "; ".join(f"component {i} ({os.path.basename(c.path) if c.path else '?'}) lacks "
                          f"{int(k) - 1} of the {len(self._words) - 1} words"
                          for i, (c, k) in enumerate(zip(self._comps, self._unknown_counts)) if k > 1)
        return (f"linear mixture with unknown='unk' is not normalised: {lacks}, and each of them gets "
                f"that component's whole <unk> probability, so p(w | <s>) sums to {total:.4g} over the "
                "union vocabulary and perplexities are too low; unknown='split' (the default) keeps "
                "it normalised")

    def _set_buckets(self, bucket_by, bins, edges, mode):
        n = len(self._comps)
        if isinstance(bucket_by, bool) or not isinstance(bucket_by, (int, np.integer)) \
                or not 0 <= bucket_by < n:
            raise ValueError(f"bucket_by={bucket_by!r}: expected the index of a model (0..{n - 1})")
        if mode != "linear":
            raise ValueError("weights per context bucket (bucket_by) need mode='linear'")
        comp = self._comps[int(bucket_by)]
        ctx = int(comp.owner.order) - 1
        if edges is not None:
            edges = np.asarray(edges, dtype=np.float64)
            if edges.ndim != 2 or edges.shape[0] != ctx:
                raise ValueError(f"bucket_edges of shape {edges.shape}: expected ({ctx}, bins - 1)")
            bins = edges.shape[1] + 1
        if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or not 1 <= bins <= MAX_BINS:
            raise ValueError(f"bucket_bins={bins!r}: expected 1..{MAX_BINS}")
        if bins > 1 and (comp.is_kenlm or not isinstance(comp.owner.core, BackoffCore)):
            raise ValueError("bucket_bins > 1 bins contexts by their back-off weight: bucket_by must "
                             "name an nplm back-off model (an ARPA or nplm binary path)")
        if bins > 1 and edges is None:
            # a placeholder until tune() puts the edges at the dev text's quantiles
            edges = np.tile(np.linspace(-1.0, 0.0, bins + 1)[1:-1], (ctx, 1))
        self.bucket_by, self.bucket_bins = int(bucket_by), int(bins)
        self._edges = edges
        # row 0: no context; bins rows per context length 1..order-1; one for <s> alone
        self._rows = ctx * int(bins) + 2

    @property
    def bucket_edges(self):
        """(order - 1, bins - 1) log10 back-off thresholds per context length of the
        bucket model, or None (one bin)."""
        return None if self._edges is None else self._edges.copy()

    # --- properties --------------------------------------------------------------

    @property
    def weights(self):
        """The interpolation weights (a copy): (n,), or (buckets, n) with bucket_by."""
        return self._weights.copy()

    @weights.setter
    def weights(self, weights):
        w = _check_weights(weights, len(self._comps), self.mode, self._rows)
        self.core.set_weights(w, -1 if self.bucket_by is None else self.bucket_by, self._edges)
        self._weights = w

    def favour(self, index, fraction):
        """Move every weight row ``fraction`` of the way towards model ``index`` alone:
        w <- (1 - f) w + f e_index.  (A distillation teacher: the table wants more of
        the back-off model than the perplexity-optimal mixture; see the README.)"""
        if not 0 <= index < len(self._comps):
            raise ValueError(f"no model {index} to favour")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"favour fraction {fraction} outside [0, 1]")
        target = np.zeros(len(self._comps))
        target[index] = 1.0
        self.weights = (1.0 - fraction) * self._weights + fraction * target

    def context_buckets(self, sentences, bos=True, eos=True):
        """The weight row each token (then </s>) of ``sentences`` is scored with:
        int32 (T,); all 0 without bucket_by."""
        tokens, offsets = self._encode(sentences, bos, eos)
        return self.core.trace(tokens, offsets, bos)[2]

    @property
    def components(self):
        """The component models (nplm models or kenlm.Model objects)."""
        return [c.owner for c in self._comps]

    @property
    def component_paths(self):
        return [c.path for c in self._comps]

    def __repr__(self):
        kind = self.mode if self.mode == "linear" or self.normalize else "loglinear-unnormalised"
        names = ", ".join(os.path.basename(c.path) if c.path else "?" for c in self._comps)
        by = "" if self.bucket_by is None else \
            f" bucketed by model {self.bucket_by} ({self.bucket_bins} back-off bins)"
        return (f"<InterpolatedModel {kind} of [{names}]{by} weights "
                f"{np.round(self._weights, 6).tolist()}>")

    def __reduce__(self):
        for c in self._comps:
            if not c.path or not os.path.exists(c.path):
                raise TypeError("an interpolated model pickles only when every component has a file")
        return (_from_spec, (self.spec(),))

    # --- per-component scores (tuning) ---------------------------------------------

    def _encode(self, sentences, bos, eos):
        ids, offsets = [], [0]
        eos_id = self.vocab.id("</s>")
        for s in _kernels.sentence_list(sentences):
            if isinstance(s, bytes):
                s = s.decode("utf-8")
            t = self.vocab.ids(split_words(s))
            if eos:
                t = np.append(t, np.int32(eos_id))
            ids.append(t)
            offsets.append(offsets[-1] + len(t))
        tokens = np.concatenate(ids).astype(np.int32) if ids else np.zeros(0, np.int32)
        return tokens, np.asarray(offsets, dtype=np.int64)

    def component_scores(self, sentences, bos=True, eos=True):
        """log10 p_i of every token (then </s>) of ``sentences`` under each component,
        as the mixture sees them (union vocabulary, unknown-word rule): float64 (n, T)."""
        tokens, offsets = self._encode(sentences, bos, eos)
        return self.core.trace(tokens, offsets, bos)[0]

    # --- tuning ------------------------------------------------------------------

    def tune(self, dev, *, max_contexts=None, memory_mib=512, threads=2, tol=1e-7,
             max_iter=500, seed=0, progress=None, allow_unnormalised=False):
        """Set the weights that minimise the perplexity of ``dev`` (a path or a list
        of sentences; bos and eos on).  Linear: EM.  Log-linear: Newton's method on
        the normalised likelihood (the gradient and Hessian are exact:
        expected minus observed log-probabilities and their covariance); also used
        for ``normalize=False`` mixtures.  The
        log-linear objective needs every component's distribution in every dev
        context; at most ``max_contexts`` contexts (default: what fits in
        ``memory_mib``) are used, sampled uniformly (seeded) with all their tokens.
        A linear mixture that is not normalised (unknown='unk' with different
        vocabularies) is refused unless ``allow_unnormalised``: EM would favour the
        component whose <unk> mass is counted many times.
        Returns a TuneResult."""
        if self._unnormalised is not None and not allow_unnormalised:
            raise ValueError(f"refusing to tune: {self._unnormalised} (allow_unnormalised=True "
                             "tunes it anyway)")
        if max_contexts is not None and (isinstance(max_contexts, bool) or not isinstance(
                max_contexts, (int, np.integer)) or max_contexts < 1):
            raise ValueError(f"max_contexts={max_contexts!r}: expected a positive number of dev "
                             "contexts (or None: what fits in memory_mib)")
        if isinstance(memory_mib, bool) or not isinstance(memory_mib, (int, float, np.number)) \
                or not memory_mib > 0:
            raise ValueError(f"memory_mib={memory_mib!r}: expected a positive number of MiB")
        threads = _kernels.thread_count(threads)
        sentences = _read_sentences(dev)
        if not sentences:
            if isinstance(dev, (str, bytes, os.PathLike)):
                raise FormatError("the tuning text has no sentences", os.fsdecode(dev))
            raise ValueError("the tuning text is empty")
        if self.mode == "linear" and self.bucket_by is not None:
            tokens, offsets = self._encode(sentences, True, True)
            lp, ctx, buckets = self.core.trace(tokens, offsets, True)
            if self.bucket_bins > 1:
                # bins of equal dev counts within each context length
                L, b, start = self.core.state_features(ctx)
                edges = self._edges.copy()
                for length in range(1, edges.shape[0] + 1):
                    sel = (L == length) & ~start
                    if sel.any():
                        edges[length - 1] = np.quantile(b[sel], np.linspace(0, 1, self.bucket_bins + 1)[1:-1])
                self._edges = edges
                self.core.set_weights(self._weights, self.bucket_by, edges)
                buckets = self.core.context_rows(ctx)
            res = tune_buckets(lp, buckets, self._rows, tol=tol, max_iter=max_iter)
        elif self.mode == "linear":
            res = tune_linear(self.component_scores(sentences), tol=tol, max_iter=max_iter)
        else:
            res = self._tune_loglinear(sentences, max_contexts, memory_mib, threads, seed, progress)
        self.weights = res.weights
        return res

    def _tune_loglinear(self, sentences, max_contexts, memory_mib, threads, seed, progress):
        tokens, offsets = self._encode(sentences, True, True)
        lp, ctx, _ = self.core.trace(tokens, offsets, True)
        uniq, inverse = np.unique(ctx, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        n, V = lp.shape[0], len(self._words)
        cap = max(1, int(memory_mib * 2**20 // (4 * n * V)))
        if max_contexts is not None:
            cap = min(cap, int(max_contexts))
        C = len(uniq)
        if C > cap:
            rng = np.random.default_rng(seed)
            chosen = np.sort(rng.choice(C, size=cap, replace=False))
        else:
            chosen = np.arange(C)
        remap = np.full(C, -1, dtype=np.int64)
        remap[chosen] = np.arange(len(chosen))
        keep = remap[inverse] >= 0
        tok_ctx = remap[inverse[keep]]
        f_sum = lp[:, keep].sum(axis=1)                    # observed log10 features
        N = int(keep.sum())
        counts = np.bincount(tok_ctx, minlength=len(chosen)).astype(np.float64)
        if progress:
            print(f"tuning on {N} of {lp.shape[1]} tokens in {len(chosen)} of {C} contexts",
                  file=sys.stderr)
        F = np.empty((len(chosen), n, V), dtype=np.float32)
        self.core.distributions(np.ascontiguousarray(uniq[chosen]), F, threads)
        bos = self.vocab.id("<s>")
        ln10 = math.log(10.0)

        def objective(w):
            # Mean negative log-likelihood (nats/token), its gradient (expected
            # minus observed log-probabilities) and Hessian (their covariance).
            lnz, e1, cov = _interp.loglinear_objective(F, counts, w, bos, threads)
            return (lnz - ln10 * float(w @ f_sum)) / N, (e1 - ln10 * f_sum) / N, cov / N

        w0 = self._weights.copy() if np.any(self._weights != 0) else np.full(n, 1.0 / n)
        start = objective(np.full(n, 1.0 / n))[0]
        w, value, it = newton(objective, w0)
        return TuneResult(w, math.exp(value), math.exp(start), it, N, sampled=len(chosen) < C)

    # --- saving ------------------------------------------------------------------

    def spec(self, base_dir=None):
        """The JSON spec (a dict); paths relative to ``base_dir`` when given."""
        paths = []
        for c in self._comps:
            if not c.path:
                raise ValueError("a component without a file (e.g. a mixture built in Python: "
                                 "save it first and pass its spec path) cannot be saved in a spec")
            p = c.path
            if base_dir is not None and not os.path.relpath(p, base_dir).startswith(".."):
                p = os.path.relpath(p, base_dir)      # a spec beside its models can move with them
            norm = None if c.is_kenlm else getattr(c.owner, "normalization", None)
            paths.append(p if norm is None else {"path": p, "normalization": norm})
        spec = {"nplm": SPEC_KEY, "version": SPEC_VERSION, "mode": self.mode,
                "normalize": self.normalize, "unknown": self.unknown, "models": paths,
                "weights": self._weights.tolist(), "vocab": self.extra_vocab}
        if self.bucket_by is not None:
            spec.update(version=SPEC_VERSION_BUCKETED, bucket_by=self.bucket_by)
            if self._edges is not None:
                spec["bucket_edges"] = self._edges.tolist()
        return spec

    def save(self, path, **extra):
        """Write the spec to ``path`` (atomically); ``extra`` keys are recorded too."""
        base = os.path.dirname(os.path.abspath(path))
        spec = self.spec(base)
        spec.update(extra)
        with atomic_write(path, "w") as f:
            json.dump(spec, f, indent=1)
            f.write("\n")


class TuneResult:
    """Outcome of tuning: weights, perplexity before (uniform weights) and after,
    iterations, and the number of dev tokens used."""

    def __init__(self, weights, perplexity, start_perplexity, iterations, tokens, sampled=False):
        self.weights = weights
        self.perplexity = perplexity
        self.start_perplexity = start_perplexity
        self.iterations = iterations
        self.tokens = tokens
        self.sampled = sampled

    def __repr__(self):
        return (f"TuneResult(weights={np.round(self.weights, 6).tolist()}, perplexity={self.perplexity:.4f}, "
                f"start={self.start_perplexity:.4f}, iterations={self.iterations}, tokens={self.tokens})")


def tune_linear(log10_probs, weights=None, tol=1e-7, max_iter=500, prior=None, strength=0.0):
    """EM for linear interpolation weights.  ``log10_probs``: (n, T) per-token log10
    probabilities of each component.  Stops when the per-token log-likelihood
    improves by less than ``tol`` (nats).  With ``prior`` (weights) and ``strength``
    > 0, a Dirichlet prior worth ``strength`` tokens of those weights (MAP EM): what
    keeps a bucket with few dev tokens near the global weights.  Returns a
    TuneResult (perplexity: of the tokens alone)."""
    lp = np.asarray(log10_probs, dtype=np.float64)
    n, T = lp.shape
    if T == 0:
        raise ValueError("no tokens to tune on")
    # Scale each token by its best component so that 10**lp never underflows.
    shift = lp.max(axis=0)
    p = np.power(10.0, lp - shift)
    w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=np.float64)
    ln10 = math.log(10.0)

    def loglik(w):
        return (np.log(w @ p).sum() + ln10 * shift.sum()) / T

    start = loglik(np.full(n, 1.0 / n))
    prev = loglik(w)
    it = 0
    a = float(strength) if prior is not None else 0.0
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is reported after the loop
        mix = w @ p
        w = w * (p / mix).mean(axis=1)
        if a > 0:
            w = (T * w + a * np.asarray(prior, dtype=np.float64)) / (T + a)
        w /= w.sum()
        cur = loglik(w)
        if cur - prev < tol:
            prev = cur
            break
        prev = cur
    return TuneResult(w, math.exp(-prev), math.exp(-start), it, T)


BUCKET_PRIOR_TOKENS = 100.0


def tune_buckets(log10_probs, buckets, rows, tol=1e-7, max_iter=500):
    """Linear weights per context bucket: EM on each bucket's tokens, with the
    weights tuned on all tokens as a prior worth BUCKET_PRIOR_TOKENS tokens (a
    bucket the dev text never reaches keeps them).  Returns a TuneResult whose
    weights are (rows, n)."""
    lp = np.asarray(log10_probs, dtype=np.float64)
    b = np.asarray(buckets)
    every = tune_linear(lp, tol=tol, max_iter=max_iter)
    W = np.tile(every.weights, (rows, 1))
    its = every.iterations
    for k in range(rows):
        sel = b == k
        if sel.any():
            r = tune_linear(lp[:, sel], every.weights, tol, max_iter, every.weights, BUCKET_PRIOR_TOKENS)
            W[k], its = r.weights, its + r.iterations
    shift = lp.max(axis=0)
    ln_p = np.log(np.einsum("tn,nt->t", W[b], np.power(10.0, lp - shift))) + math.log(10.0) * shift
    return TuneResult(W, math.exp(-ln_p.mean()), every.start_perplexity, its, lp.shape[1])


def newton(objective, w, max_iter=50, tol=1e-12):
    """Minimise a convex ``objective(w) -> (value, gradient, hessian)`` by Newton's
    method with backtracking (the normalised log-linear likelihood is convex in the
    weights: log-sum-exp of linear functions).  Returns (w, value, iterations)."""
    value, grad, hess = objective(w)
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is reported after the loop
        n = len(w)
        # A tiny ridge keeps the step defined when components are collinear.
        step = -np.linalg.solve(hess + 1e-10 * np.eye(n) * max(1.0, np.trace(hess)), grad)
        decrement = -float(grad @ step)
        if decrement < tol:
            break
        t = 1.0
        while True:
            cand = w + t * step
            v, g, h = objective(cand)
            if v <= value - 0.25 * t * decrement or t < 1e-8:
                break
            t *= 0.5
        if v > value:
            break
        w, value, grad, hess = cand, v, g, h
    return w, value, it


def _read_sentences(dev):
    if isinstance(dev, (str, bytes, os.PathLike)):
        # (invalid UTF-8 is an error naming the line)
        # (a line is blank when it has no words as scoring splits them: KenLM's delimiters)
        return [line.rstrip("\n") for line in utf8_lines(os.fsdecode(dev)) if split_words(line)]
    return [s.decode("utf-8") if isinstance(s, bytes) else s for s in dev]


def interpolate(models, weights=None, mode="linear", **kwargs):
    """One model from several (nplm models, paths, kenlm.Model objects).  ``mode`` is
    "linear" or "loglinear"; keyword options: normalize (log-linear; default True),
    unknown ("split", the default, or "unk"), vocab (extra words), config, cache_entries,
    bucket_by (linear: weights per context bucket of that model; module docstring).
    Uniform weights by default.  See the module docstring."""
    return InterpolatedModel(models, weights, mode, **kwargs)


# --- the JSON spec -------------------------------------------------------------------


def is_spec(path):
    """Whether ``path`` is an interpolation spec (a JSON object naming itself)."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError:
        return False
    return kind_of_head(head) == "spec"


def read_spec(path, stream=None):  # noqa: C901 - validates each field of a spec file with its own message
    """Parse and check a spec file (read from ``stream`` when given: the file
    already open); FormatError names the file and the problem."""
    try:
        if stream is None:
            with open(path, "rb") as f:
                spec = json.loads(f.read().decode("utf-8"))
        else:
            spec = json.loads(stream.read().decode("utf-8"))
    except json.JSONDecodeError as e:
        raise FormatError(f"invalid JSON: {e.msg}", path, e.lineno) from None
    except UnicodeDecodeError:
        raise FormatError("invalid UTF-8", path) from None
    except RecursionError:
        raise FormatError("JSON nested too deeply for a spec", path) from None
    if not isinstance(spec, dict) or spec.get("nplm") != SPEC_KEY:
        raise FormatError(f'not an interpolation spec (needs "nplm": "{SPEC_KEY}")', path)
    version = spec.get("version")
    if type(version) is not int or version not in (SPEC_VERSION, SPEC_VERSION_BUCKETED):
        raise FormatError(f"unsupported spec version {version!r} (this nplm reads "
                          f"{SPEC_VERSION} and {SPEC_VERSION_BUCKETED})", path)
    models = spec.get("models")

    def entry_ok(m):
        return isinstance(m, str) or (isinstance(m, dict) and isinstance(m.get("path"), str)
                                      and set(m) <= {"path", "normalization"})
    if not isinstance(models, list) or not models or not all(entry_ok(m) for m in models):
        raise FormatError('"models" must be a non-empty list of paths (or {"path": ..., '
                          '"normalization": ...} objects)', path)
    weights = spec.get("weights")

    def numbers(row):
        return isinstance(row, list) and len(row) == len(models) and all(map(_finite_number, row))
    by = spec.get("bucket_by")
    if spec["version"] == SPEC_VERSION_BUCKETED:
        if by is None:
            raise FormatError(f'"bucket_by" is missing: spec version {SPEC_VERSION_BUCKETED} (weights per '
                              'context bucket) requires it, the index of the model whose context picks '
                              f'the row of weights (0..{len(models) - 1}); a spec with one row of weights '
                              f'is version {SPEC_VERSION}', path)
        if isinstance(by, bool) or not isinstance(by, int) or not 0 <= by < len(models):
            raise FormatError(f'"bucket_by" must be the index of a model (0..{len(models) - 1})', path)
        if not (isinstance(weights, list) and weights and all(numbers(r) for r in weights)):
            raise FormatError(f'"weights" must be a list of rows of {len(models)} numbers', path)
        edges = spec.get("bucket_edges")
        if edges is not None and not (isinstance(edges, list) and edges and all(
                isinstance(r, list) and r and len(r) == len(edges[0]) and all(
                    map(_finite_number, r)) for r in edges)):
            raise FormatError('"bucket_edges" must be a list of equally long rows of numbers', path)
    elif by is not None or "bucket_edges" in spec:
        raise FormatError(f'"bucket_by" and "bucket_edges" need spec version {SPEC_VERSION_BUCKETED}', path)
    elif not numbers(weights):
        raise FormatError(f'"weights" must be a list of {len(models)} numbers', path)
    if spec.get("mode") not in MODES:
        raise FormatError(f'"mode" must be one of {", ".join(MODES)}, got {spec.get("mode")!r}', path)
    if spec.get("unknown", "unk") not in UNKNOWN:
        raise FormatError(f'"unknown" must be one of {", ".join(UNKNOWN)}', path)
    # (reliability fix: these two were passed on unchecked and raised TypeError)
    vocab = spec.get("vocab")
    if vocab is not None and not (isinstance(vocab, list) and all(isinstance(w, str) for w in vocab)):
        raise FormatError('"vocab" must be a list of words', path)
    if not isinstance(spec.get("normalize", True), bool):
        raise FormatError('"normalize" must be true or false', path)
    base = os.path.dirname(os.path.abspath(path))

    def resolve(p):
        return p if os.path.isabs(p) else os.path.join(base, p)
    spec["models"] = [resolve(m) if isinstance(m, str) else dict(m, path=resolve(m["path"]))
                      for m in models]
    return spec


def _finite_number(x):
    """A JSON number that is a finite float (10**400 is an int no float holds)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def _from_spec(spec, config=None):
    return InterpolatedModel(spec["models"], spec["weights"], spec["mode"],
                             normalize=spec.get("normalize", True), unknown=spec.get("unknown", "split"),
                             vocab=spec.get("vocab") or None, config=config,
                             bucket_by=spec.get("bucket_by"), bucket_edges=spec.get("bucket_edges"))


class SpecData:
    """What ``nplm.Model`` attaches for a spec file: the mixture's core and vocab."""

    def __init__(self, mixture):
        self.mixture = mixture
        self.core = mixture.core
        self.vocab = mixture.vocab


# Limits of one spec load: how deep specs may nest, and how many components the whole
# tree may hold, a nested spec counted again for each time it is named.  Without
# them, specs that each name the next one 16 times made 4,096 loads (9.8 GB) from
# 1.4 KB of JSON at depth 3, and a chain of 200 specs a RecursionError.
MAX_SPEC_DEPTH = 8
MAX_SPEC_COMPONENTS = 256


class _SpecLoad:
    """The state of one outermost spec load, in its thread: the specs loading
    (real paths, outermost first), the models loaded so far (each file is loaded
    once however often the specs name it) and the components counted."""

    def __init__(self):
        self.stack = []
        self.models = {}        # (real path, normalization) -> Model
        self.sizes = {}         # real path of a loaded spec -> components in its tree
        self.components = 0

    def count(self, n, path):
        self.components += n
        if self.components > MAX_SPEC_COMPONENTS:
            raise FormatError(f"the interpolation specs hold more than {MAX_SPEC_COMPONENTS} components "
                              "in all (a spec is counted each time one names it)", path)


_loading = threading.local()


def _component_model(name, config, normalization=None):
    """The Model of a component path: inside a spec load, counted against its
    budget, loaded once however often the specs name it, and with errors that do
    not quote the file (the user named the spec, not the files it names)."""
    load = getattr(_loading, "load", None)
    if load is None:
        return Model(name, config, normalization)
    real = os.path.realpath(name)
    load.count(1 + load.sizes.get(real, 0), load.stack[-1])
    key = (real, normalization)
    if key not in load.models:
        with content_hidden():
            load.models[key] = Model(name, config, normalization)
    return load.models[key]


def spec_cycle_error(stack, real, path):
    """The error for spec ``path`` (real path ``real``) met again while the specs
    ``stack`` (real paths, outermost first) load."""
    cycle = " -> ".join(list(stack[stack.index(real):]) + [real])
    return FormatError(f"the interpolation specs form a cycle ({cycle}): a spec cannot be "
                       "a component of itself", path)


def load_spec(path, config=None, stream=None):
    """Load a spec file as an InterpolatedModel (wrapped for nplm.Model); ``stream``:
    the file already open."""
    spec = read_spec(path, stream)
    real = os.path.realpath(path)
    load = getattr(_loading, "load", None)
    outermost = load is None
    if outermost:
        load = _loading.load = _SpecLoad()
    if real in load.stack:
        raise spec_cycle_error(load.stack, real, path)
    if len(load.stack) >= MAX_SPEC_DEPTH:
        raise FormatError(f"interpolation specs nested more than {MAX_SPEC_DEPTH} deep", path)
    load.stack.append(real)
    start = load.components
    try:
        data = SpecData(_from_spec(spec, config))
        load.sizes[real] = load.components - start
        return data
    except ValueError as e:
        if isinstance(e, FormatError):
            raise
        raise FormatError(str(e), path) from e
    finally:
        load.stack.pop()
        if outermost:
            _loading.load = None


register_file_kind("spec", load_spec)
