"""The feed-forward neural n-gram network: configuration, parameters, save/load and
exact scoring.

Architecture (Bengio et al. 2003; Vaswani et al. 2013; Baltescu & Blunsom 2015)::

    x_j  = emb[w_j]                           j = 1..n-1 (context words, oldest first)
    a0   = f(sum_j C_j x_j + b0)              C_j: full (d x r0) or diagonal (d)
    a_l  = f(W_l a_{l-1} + b_l)               the remaining hidden layers
    out  = softmax | class-factored | tree-factored over h = a_last

With ``context="full"`` the first hidden size is the size of a0 (so ``hidden=(750,150)``
is Vaswani et al.'s network); with ``"diagonal"`` a0 has the embedding size and every
hidden size is a further dense layer (``hidden=()`` is Baltescu & Blunsom's model).
f is ReLU, tanh or identity.  Probabilities are exact for every output kind; NCE-trained
models can also be read unnormalised (log-normaliser taken as 0).
"""
import ctypes
import dataclasses
import math
import os
import threading

import numpy as np

from nplm._kernels import thread_count
from nplm.errors import FormatError
from nplm.io import container
from nplm.neural.quantize import dequantize_arrays
from nplm.neural.shortlist import Shortlist
from nplm.neural.vocab import SPECIALS, Vocabulary

# A spinning OpenMP pool steals the cores OpenBLAS's own threads need between the many
# short parallel loops of a minibatch; sleeping workers are much faster here.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    from nplm.neural import _blas
    from nplm.neural import _train as _nn
except ImportError as e:  # pragma: no cover - build problem
    raise ImportError("nplm._nn is not built; run `python setup.py build_ext --inplace` "
                      f"in the source tree ({e})") from None

KIND = "neural"
# Model file versions: 2 added the shortlist; a net without one is written as 1, which
# every reader of this kind understands.  Both load.
FORMAT = 2
FORMATS = (1, 2)
LOG10E = 1.0 / math.log(10.0)
CTX_CODES = {"full": 0, "diagonal": 1}
ACT_CODES = {"relu": 0, "tanh": 1, "identity": 2}
OUT_CODES = {"softmax": 0, "class": 1, "tree": 2}
_OBJ = {"mle": 0, "nce": 1}
PARAM_NAMES = _nn.PARAM_NAMES
WORK_NAMES = _nn.WORK_NAMES


@dataclasses.dataclass
class NeuralConfig:
    """Shape of the network.  The defaults are the recommended PTB model.

    ``shortlist`` N > 0 gives output units for only the N most frequent training words
    (the specials always have theirs) and one out-of-shortlist unit, whose probability
    the other words share in proportion to their training counts; ``shortlist_input``
    maps the context side the same way.  The model still scores every word of its
    vocabulary (see nplm.neural.shortlist).

    ``variable_history`` (the default) trains on randomly truncated contexts too, so
    that the network also gives good probabilities after shorter histories: the lower
    orders a distilled back-off table and fallback normalisation need.  A share
    ``full_history`` of the examples keeps the whole context, the others a uniformly
    drawn shorter one; 1/(order-1) is Zamora-Martinez et al.'s uniform draw over every
    length.  With 0.75, PTB perplexity at the full context is that of a network
    trained without truncation, and after one to three words close to the uniform
    draw's (docs/guide/train.md).  A model file without the keys was trained without
    truncation, or (with ``variable_history`` only) by the uniform draw."""
    order: int = 5
    embedding_dim: int = 1000
    hidden: tuple = ()
    context: str = "diagonal"   # Baltescu & Blunsom's pragmatic choice: wide and cheap
    activation: str = "relu"
    output: str = "class"
    objective: str = "auto"     # nce, or mle for a tree output (NCE does not apply there)
    noise_samples: int = 10
    classes: int = 0            # 0: about sqrt(V)
    clustering: str = "brown"
    variable_history: bool = True
    full_history: float = 0.75  # with variable_history: share of examples that keep the whole context
    tie_embeddings: bool = False  # one table for input and output word vectors (Press & Wolf 2017)
    shortlist: int = 0          # output units for only this many most frequent words + OOS (0: all words)
    shortlist_input: bool = False  # the context side too: OOS words share the OOS unit's embedding

    def resolved_objective(self):
        """The objective "auto" stands for: MLE for a tree output (NCE does not apply
        there), NCE otherwise; any other value as it is."""
        if self.objective == "auto":
            return "mle" if self.output == "tree" else "nce"
        return self.objective

    def validate(self):
        """Raise ValueError naming the first nonsense setting."""
        def need(cond, msg):
            if not cond:
                raise ValueError(msg)
        need(isinstance(self.order, int) and self.order >= 2,
             f"order must be at least 2 (a neural model needs a context), not {self.order}")
        need(self.order <= 16, f"order {self.order} is above the supported maximum of 16")
        need(self.embedding_dim >= 1, f"embedding dimension must be positive, not {self.embedding_dim}")
        self.hidden = tuple(int(h) for h in self.hidden)
        need(len(self.hidden) <= 2, f"at most two hidden layers are supported, not {len(self.hidden)}")
        need(all(h >= 1 for h in self.hidden), f"hidden layer sizes must be positive, not {self.hidden}")
        need(self.context in CTX_CODES, f"context must be one of {sorted(CTX_CODES)}, not {self.context!r}")
        need(self.activation in ACT_CODES, f"activation must be one of {sorted(ACT_CODES)}, not {self.activation!r}")
        need(self.output in OUT_CODES, f"output must be one of {sorted(OUT_CODES)}, not {self.output!r}")
        self.objective = self.resolved_objective()
        need(self.objective in _OBJ, f"objective must be one of {sorted(_OBJ)}, not {self.objective!r}")
        need(not (self.output == "tree" and self.objective == "nce"),
             "tree output is normalised by construction; train it with objective 'mle'")
        if self.objective == "nce":
            need(self.noise_samples >= 1, f"NCE needs at least one noise sample, not {self.noise_samples}")
        need(self.classes >= 0, f"number of classes must be positive (or 0 for automatic), not {self.classes}")
        need(self.clustering in ("brown", "frequency"),
             f"clustering must be 'brown' or 'frequency', not {self.clustering!r}")
        need(not isinstance(self.full_history, bool) and isinstance(self.full_history, (int, float))
             and 0.0 <= self.full_history <= 1.0,
             f"full history share must be a number from 0 to 1, not {self.full_history!r}")
        need(not isinstance(self.shortlist, bool) and isinstance(self.shortlist, (int, np.integer))
             and self.shortlist >= 0,
             f"shortlist must be a non-negative number of words (0: none), not {self.shortlist!r}")
        self.shortlist = int(self.shortlist)
        self.shortlist_input = bool(self.shortlist_input)
        need(not self.shortlist_input or self.shortlist,
             "a shortlist input vocabulary needs a shortlist (give its size)")
        if self.tie_embeddings:
            need(not self.shortlist or self.shortlist_input,
                 "tied embeddings with a shortlist need the shortlist on the input side too "
                 "(the output has no rows for the words outside it)")
            need(self.output in ("softmax", "class"),
                 "tied embeddings need a softmax or class output (a tree's rows are inner nodes, not words)")
            r = self.layer_sizes[1][-1] if self.layer_sizes[1] else self.layer_sizes[0]
            need(r == self.embedding_dim,
                 f"tied embeddings need the last hidden layer ({r}) to be as wide as the embeddings "
                 f"({self.embedding_dim})")
        return self

    @property
    def layer_sizes(self):
        """(r0, dense sizes) for this configuration."""
        if self.context == "full" and self.hidden:
            return self.hidden[0], self.hidden[1:]
        return self.embedding_dim, self.hidden

    def to_json(self):
        d = dataclasses.asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_json(cls, d):
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - fields
        if unknown:
            raise ValueError(f"unknown neural config keys {sorted(unknown)}")
        d = dict(d)
        d["hidden"] = tuple(d.get("hidden", ()))
        d.setdefault("variable_history", False)
        d.setdefault("full_history", 1.0 / max(1, d.get("order", cls.order) - 1))
        return cls(**d).validate()


def class_layout(word_class, n_classes):
    """(class_start (C+1), class_words (V), word_pos (V)) for an assignment, words of a
    class in id order.  Every class must be non-empty."""
    word_class = np.asarray(word_class, dtype=np.int32)
    if word_class.size and (word_class.min() < 0 or word_class.max() >= n_classes):
        raise ValueError("word class outside 0..C-1")
    sizes = np.bincount(word_class, minlength=n_classes)
    if np.any(sizes == 0):
        raise ValueError(f"class {int(np.flatnonzero(sizes == 0)[0])} has no words")
    class_start = np.zeros(n_classes + 1, np.int32)
    np.cumsum(sizes, out=class_start[1:])
    class_words = np.argsort(word_class, kind="stable").astype(np.int32)
    word_pos = np.empty_like(class_words)
    word_pos[class_words] = np.arange(class_words.size, dtype=np.int32)
    return class_start, class_words, word_pos


def _init_classes(p, structs, word_class, counts, r, rng):
    """A class output's layout into ``structs`` and its initial weights into ``p``: rows
    of out_w in class order, word bias log p(w | class), class bias log p(class), from
    the units' ``counts`` (smoothed)."""
    word_class = np.ascontiguousarray(word_class, np.int32)
    C = int(word_class.max()) + 1
    class_start, class_words, word_pos = class_layout(word_class, C)
    structs.update(word_class=word_class, class_start=class_start, class_words=class_words, word_pos=word_pos)
    logq = np.log(counts / counts.sum())
    ccount = np.bincount(word_class, weights=counts, minlength=C)
    p["out_b"] = (logq - np.log(ccount[word_class] / counts.sum()))[class_words].astype(np.float32)
    p["cls_w"] = rng.uniform(-0.05, 0.05, size=(C, r)).astype(np.float32)
    p["cls_b"] = np.log(ccount / ccount.sum()).astype(np.float32)


def dummy_structs(V):
    z = np.zeros(1, np.int32)
    return {"word_class": np.zeros(V, np.int32), "class_start": np.array([0, V], np.int32),
            "class_words": np.arange(V, dtype=np.int32), "word_pos": np.arange(V, dtype=np.int32),
            "points": z.reshape(1, 1), "codes": np.zeros((1, 1), np.int8), "lengths": np.zeros(V, np.int32)}


_STRUCTS_OF = {"class": ("word_class", "class_start", "class_words", "word_pos"),
               "tree": ("points", "codes", "lengths")}


def _own_structs(output, V, structs):
    """The structure arrays of a net with ``output``: its own kind's from ``structs``
    (checked by NeuralNet._check), placeholders for the other kinds', which the
    kernels are handed but never read -- a file may lack them or hold any shape."""
    own = dummy_structs(V)
    for name in _STRUCTS_OF.get(output, ()):
        if name not in structs:
            raise FormatError(f"the {output} output's structure array {name!r} is missing")
        own[name] = structs[name]
    return own


class NeuralNet:
    """A network: ``config`` (NeuralConfig), ``vocab`` (Vocabulary), ``params`` (dict of
    float32 arrays, names as in PARAM_NAMES; unused ones have size 0) and ``structs``
    (class layout / Huffman arrays).

    With a shortlist (``config.shortlist``; ``shortlist`` then holds the map, see
    nplm.neural.shortlist) the network's output units are the shortlist's words, the
    specials and one out-of-shortlist unit, and its input rows either every word or
    the same units: ``structs`` and the output parameters are over units, ``emb`` over
    input rows.  Every method here takes and gives word ids of the whole vocabulary
    (the model's); the training engines work on unit ids (``unit_ids``,
    ``input_ids``)."""

    def __init__(self, config, vocab, params, structs):
        self.config = config.validate()
        self.vocab = vocab
        self.shortlist = Shortlist.of(self.config, vocab)
        self.params = params
        self.structs = _own_structs(self.config.output, self.n_units, structs)
        self._engine = None
        self._check()

    # -- construction
    @classmethod
    def create(cls, config, vocab, word_class=None, tree=None, seed=1):
        """Randomly initialised network.  ``word_class`` (V,) int for class output;
        ``tree`` = (points, codes, lengths) for tree output; with a shortlist both are
        over its output units (V = ``Shortlist.n_units``), not the words."""
        config.validate()
        sl = Shortlist.of(config, vocab)
        V = sl.n_units if sl else len(vocab)          # output units
        V_in = sl.n_inputs if sl else len(vocab)      # embedding rows
        m, d = config.order - 1, config.embedding_dim
        r0, dense = config.layer_sizes
        rng = np.random.default_rng(seed)

        def uni(shape, fan_in, fan_out):
            a = math.sqrt(6.0 / (fan_in + fan_out))
            return rng.uniform(-a, a, size=shape).astype(np.float32)

        p = {}
        p["emb"] = rng.uniform(-0.1, 0.1, size=(V_in, d)).astype(np.float32)
        if config.context == "full":
            p["ctx"] = uni((m * d, r0), m * d, r0)
        else:
            p["ctx"] = np.ones((m, d), np.float32)
        p["b0"] = np.zeros(r0, np.float32)
        sizes = [r0] + list(dense)
        for i, name in enumerate(("w1", "w2")):
            if i < len(dense):
                p[name] = uni((sizes[i], sizes[i + 1]), sizes[i], sizes[i + 1])
                p["b" + name[1]] = np.zeros(sizes[i + 1], np.float32)
            else:
                p[name] = np.zeros((0, 0), np.float32)
                p["b" + name[1]] = np.zeros(0, np.float32)
        r = sizes[-1]
        counts = (sl.unit_counts if sl else vocab.counts).astype(np.float64) + 0.5
        logq = np.log(counts / counts.sum())
        structs = dummy_structs(V)
        if config.output == "tree":
            if tree is None:
                raise ValueError("tree output needs a Huffman tree")
            points, codes, lengths = (np.ascontiguousarray(tree[0], np.int32),
                                      np.ascontiguousarray(tree[1], np.int8), np.ascontiguousarray(tree[2], np.int32))
            structs.update(points=points, codes=codes, lengths=lengths)
            p["out_w"] = np.zeros((max(V - 1, 1), r), np.float32)
            p["out_b"] = np.zeros(max(V - 1, 1), np.float32)
        else:
            p["out_w"] = rng.uniform(-0.05, 0.05, size=(V, r)).astype(np.float32)
            p["out_b"] = logq.astype(np.float32)
        if config.output == "class":
            if word_class is None:
                raise ValueError("class output needs a word-class assignment")
            _init_classes(p, structs, word_class, counts, r, rng)
        else:
            p["cls_w"] = np.zeros((0, 0), np.float32)
            p["cls_b"] = np.zeros(0, np.float32)
        if config.tie_embeddings:
            p["out_w"] = np.ascontiguousarray(p["emb"][structs["class_words"]])
        return cls(config, vocab, p, structs)

    def _check(self):
        V = self.n_units
        c = self.config
        m, d = c.order - 1, c.embedding_dim
        r0, dense = c.layer_sizes
        sizes = [r0] + list(dense)
        C = self.n_classes
        expect = {"emb": (self.n_inputs, d), "ctx": (m * d, r0) if c.context == "full" else (m, d), "b0": (r0,),
                  "w1": (sizes[0], sizes[1]) if len(dense) >= 1 else (0, 0), "b1": (sizes[1],) if len(dense) >= 1 else (0,),
                  "w2": (sizes[1], sizes[2]) if len(dense) >= 2 else (0, 0), "b2": (sizes[2],) if len(dense) >= 2 else (0,),
                  "out_w": (self.n_out_rows, sizes[-1]), "out_b": (self.n_out_rows,),
                  "cls_w": (C, sizes[-1]) if c.output == "class" else (0, 0), "cls_b": (C,) if c.output == "class" else (0,)}
        spec = getattr(self.params, "spec", None)    # (a lazily converted mapping)
        for name in PARAM_NAMES:
            if name not in self.params:
                raise FormatError(f"parameter {name!r} is missing")
            shape, dtype = spec(name) if spec else (tuple(self.params[name].shape), self.params[name].dtype)
            if shape != expect[name] or dtype != np.float32:
                raise FormatError(f"parameter {name!r} has shape {shape} {dtype}, "
                                  f"expected {expect[name]} float32")
        s = self.structs
        if c.output == "class":
            wc = s["word_class"]
            if wc.shape != (V,) or wc.min() < 0 or wc.max() >= C:
                raise FormatError("class assignment does not match the vocabulary")
            cs, cw, wp = class_layout(wc, C)
            if not (np.array_equal(cs, s["class_start"]) and np.array_equal(wp, s["word_pos"])
                    and np.array_equal(cw, s["class_words"])):
                raise FormatError("class layout is inconsistent with the class assignment")
        if c.output == "tree":
            pts, codes, lens = s["points"], s["codes"], s["lengths"]
            if lens.shape != (V,) or pts.ndim != 2 or pts.shape != codes.shape or pts.shape[0] != V:
                raise FormatError("Huffman tree does not match the vocabulary")
            if lens.min() < 1 or lens.max() > pts.shape[1]:
                raise FormatError("Huffman code lengths out of range")
            L = pts.shape[1]
            valid = np.arange(L)[None, :] < lens[:, None]
            if np.any((pts < 0) & valid) or np.any((pts >= self.n_out_rows) & valid):
                raise FormatError("Huffman tree node id out of range")
            if np.any((codes != 0) & (codes != 1) & valid):
                raise FormatError("Huffman codes must be 0 or 1")

    @property
    def n_classes(self):
        if self.config.output != "class":
            return 0
        return int(self.structs["class_start"].size - 1)

    @property
    def n_out_rows(self):
        V = self.n_units
        return max(V - 1, 1) if self.config.output == "tree" else V

    @property
    def n_units(self):
        """Output units: the vocabulary's words, or with a shortlist its words, the
        specials and the out-of-shortlist unit."""
        return self.shortlist.n_units if self.shortlist is not None else len(self.vocab)

    @property
    def n_inputs(self):
        """Rows of the embedding table (the words, or the shortlist's units)."""
        return self.shortlist.n_inputs if self.shortlist is not None else len(self.vocab)

    @property
    def unit_counts(self):
        """Training counts per output unit (the vocabulary's counts without a shortlist)."""
        return self.shortlist.unit_counts if self.shortlist is not None else self.vocab.counts

    def unit_ids(self, word_ids):
        """Output units of word ids (the ids themselves without a shortlist)."""
        if self.shortlist is None:
            return word_ids
        return self.shortlist.out_map[word_ids]

    def input_ids(self, word_ids):
        """Embedding rows of word ids (the ids themselves unless the shortlist covers
        the input side too)."""
        if self.shortlist is None:
            return word_ids
        return self.shortlist.inputs_of(word_ids)

    def word_scores(self, unit_scores, scale=1.0, dtype=np.float32):
        """(N, V) natural-log scores of the vocabulary's words, times ``scale``, from
        (N, n_units) ones of the units: an out-of-shortlist word's is its unit's plus
        its log unigram ratio (see nplm.neural.shortlist)."""
        if self.shortlist is None:
            return (np.asarray(unit_scores, np.float64) * scale).astype(dtype, copy=False)
        return self.shortlist.word_scores(unit_scores, scale, dtype)

    @property
    def file_format(self):
        """The model-file version this net needs: 2 with a shortlist, else 1."""
        return 2 if self.shortlist is not None else 1

    @property
    def order(self):
        return self.config.order

    # -- engines
    def dims(self, nthreads=1, bmax=1):
        c = self.config
        r0, dense = c.layer_sizes
        sizes = [r0] + list(dense)
        return {"V": self.n_units, "V_in": self.n_inputs, "n_words": len(self.vocab),
                "m": c.order - 1, "d": c.embedding_dim, "r0": r0,
                "h1": sizes[1] if len(sizes) > 1 else 0, "h2": sizes[2] if len(sizes) > 2 else 0,
                "n_dense": len(dense), "r": sizes[-1], "C": max(self.n_classes, 1),
                "n_out_rows": self.n_out_rows, "ctx_kind": CTX_CODES[c.context], "act": ACT_CODES[c.activation],
                "out_kind": OUT_CODES[c.output], "obj": _OBJ[c.objective], "k": c.noise_samples,
                "max_len": int(self.structs["points"].shape[1]), "nthreads": nthreads, "bmax": bmax}

    def engine(self, bmax, nthreads=1, dtype=np.float32, params=None, accum=None, forward_only=False,
               score_width=None):
        """A kernel engine over ``params`` (default: this net's arrays, which must then be
        writeable) with fresh gradients, optimiser state ``accum`` and scratch space.
        ``forward_only``: an engine that only scores (logprob, distribution) and never
        writes gradients or optimiser state; those slots alias the parameters instead
        of holding two more copies of the model.  ``score_width``: columns of the score
        scratch (default: room for every kind of call, V for most nets)."""
        dims = self.dims(nthreads, bmax)
        params = [self.params[n] for n in PARAM_NAMES] if params is None else params
        if forward_only:
            grads = accum = params
        else:
            grads = [np.zeros(p.shape, dtype) for p in params]
        if accum is None:
            accum = [np.zeros(p.shape, dtype) for p in params]
        # A parameter array passed twice (tied embeddings) shares its gradient and
        # optimiser state too: both layers' gradients then add up in one buffer.
        for i, p in enumerate(params):
            for j in range(i):
                if params[j] is p:
                    grads[i] = grads[j]
                    accum[i] = accum[j]
        B, m, d, V = bmax, dims["m"], dims["d"], dims["V"]
        r0, h1, h2, r, k, C = dims["r0"], dims["h1"], dims["h2"], dims["r"], dims["k"], dims["C"]
        ncols = max(V, C, k, dims["max_len"], 1) if score_width is None else score_width
        shapes = {"X": (B, m * d), "A0": (B, r0), "A1": (B, h1), "A2": (B, h2), "D0": (B, r0), "D1": (B, h1),
                  "D2": (B, h2), "M0": (B, r0), "M1": (B, h1), "M2": (B, h2), "dX": (B, m * d),
                  "S": (B, ncols), "S2": (B,), "Hs": (B, r), "dHs": (B, r), "Wn": (k, r), "dWn": (k, r),
                  "loss": (B,), "tmp": (3 * B,), "MX": (B, m * d),
                  "U": (B, r0) if dims["ctx_kind"] == CTX_CODES["full"] else (0,)}
        work = [np.zeros(shapes[n], dtype) for n in WORK_NAMES]
        structs = {k_: np.ascontiguousarray(v) for k_, v in self.structs.items()}
        return _nn.Engine(dims, params, grads, accum, work, structs), grads, accum

    def _eval_engines(self, bmax, count, distribution=False):
        """``count`` single-threaded scoring engines over this net's parameters (cached).
        Per-word scores of a class or tree net need score scratch for the classes or a
        path only; whole distributions (and a softmax's normaliser) need V columns a row
        (at V = 33k, 135 MB a thread for validation's 1024-row blocks)."""
        cache = self._engine = self._engine or {}
        wide = distribution or self.config.output == "softmax"
        have = cache.get(wide)
        if have is None or have[1] < bmax or len(have[0]) < count:
            if "params" not in cache:     # engines need writeable arrays: one copy serves both kinds
                cache["params"] = [np.array(self.params[n], copy=True) if not self.params[n].flags.writeable
                                   else self.params[n] for n in PARAM_NAMES]
            dims = self.dims()
            width = None if wide else max(dims["C"], dims["k"], dims["max_len"], 1)
            have = cache[wide] = ([self.engine(bmax, nthreads=1, params=cache["params"], forward_only=True,
                                               score_width=width)[0] for _ in range(count)], bmax)
        return have[0]

    def invalidate(self):
        """Call after changing params in place through another engine."""
        self._engine = None

    # -- scoring
    def _contexts(self, context_ids, n=None):
        """Checked contexts (N, n-1) of word ids, mapped to the network's input rows."""
        ctx = np.ascontiguousarray(context_ids, dtype=np.int32)
        if ctx.ndim != 2 or ctx.shape[1] != self.order - 1:
            raise ValueError(f"contexts must have shape (N, {self.order - 1}), not {ctx.shape}")
        if n is not None and ctx.shape[0] != n:
            raise ValueError(f"{ctx.shape[0]} contexts for {n} words")
        V = len(self.vocab)
        if ctx.size and (ctx.min() < 0 or ctx.max() >= V):
            raise ValueError(f"context word id outside 0..{V - 1}")
        return np.ascontiguousarray(self.input_ids(ctx), dtype=np.int32)

    def log_prob(self, context_ids, word_ids, normalised=True, batch=1024, threads=None):
        """Natural-log probabilities of ``word_ids`` (N,) after ``context_ids`` (N, n-1)
        (oldest word first, <null>-padded).  normalised=False gives the self-normalised
        score of an NCE model (exact anyway for tree output).  ``threads``: how many
        split the rows (default: up to 2, the CPUs allowing)."""
        words = np.ascontiguousarray(word_ids, dtype=np.int32)
        if words.ndim != 1:
            raise ValueError("word ids must be one-dimensional")
        ctx = self._contexts(context_ids, words.size)
        V = len(self.vocab)
        if words.size and (words.min() < 0 or words.max() >= V):
            raise ValueError(f"word id outside 0..{V - 1}")
        out = np.empty(words.size, np.float64)
        threads = _default_threads() if threads is None else thread_count(threads)
        engines = self._eval_engines(min(batch, max(words.size, 1)), threads)
        units = np.ascontiguousarray(self.unit_ids(words), dtype=np.int32)

        def work(lo0, hi0, w):
            for lo in range(lo0, hi0, batch):
                hi = min(lo + batch, hi0)
                out[lo:hi] = engines[w].logprob(ctx[lo:hi], units[lo:hi], normalised)
        _run_split(work, words.size, threads)
        if self.shortlist is not None:
            out += self.shortlist.log_ratio[words]
        return out

    def log10_prob(self, context_ids, word_ids, normalised=True):
        """log10 p(word | context) per row; see log_prob."""
        return self.log_prob(context_ids, word_ids, normalised) * LOG10E

    def log10_distribution(self, context_ids, batch=256):
        """(N, V) log10 p(w | context) over the whole vocabulary, exact (with a
        shortlist, every word: the out-of-shortlist ones get their split)."""
        ctx = self._contexts(context_ids)
        out = np.empty((ctx.shape[0], len(self.vocab)), np.float32)
        threads = _default_threads()
        engines = self._eval_engines(min(batch, max(ctx.shape[0], 1)), threads, distribution=True)

        def work(lo0, hi0, w):
            for lo in range(lo0, hi0, batch):
                hi = min(lo + batch, hi0)
                if self.shortlist is None:
                    out[lo:hi] = engines[w].distribution(ctx[lo:hi]) * LOG10E
                else:
                    out[lo:hi] = self.shortlist.word_scores(engines[w].distribution(ctx[lo:hi]), LOG10E)
        _run_split(work, ctx.shape[0], threads)
        return out

    def perplexity(self, contexts, targets, threads=None):
        """exp of the mean negative log-likelihood (exact normalisation)."""
        if len(targets) == 0:
            raise ValueError("no tokens to compute a perplexity over")
        return float(np.exp(-np.mean(self.log_prob(contexts, targets, threads=threads))))

    # -- persistence
    def arrays(self):
        a = {"param." + n: self.params[n] for n in PARAM_NAMES}
        a.update(self.vocab.to_arrays())
        for n in sorted(self.structs):  # fixed order: equal models give equal bytes
            a["struct." + n] = self.structs[n]
        return a

    def save(self, path, extra_config=None, extra_arrays=None):
        """Write atomically to nplm's binary container (kind 'neural')."""
        config = {"format": self.file_format, "net": self.config.to_json(), "specials": list(SPECIALS)}
        if extra_config:
            config.update(extra_config)
        arrays = self.arrays()
        if extra_arrays:
            arrays.update(extra_arrays)
        container.write(path, KIND, config, arrays)

    @classmethod
    def load(cls, path, return_container=False, lazy=False, copy=False):
        """Map a saved network (arrays stay read-only views into the file; a
        quantised file's weights are dequantised to float32 arrays, with ``lazy``
        each when first used: see formats.quantize.dequantize_arrays)."""
        c = container.read(path, expect_kind=KIND, copy=copy)
        try:
            if c.config.get("format") not in FORMATS:
                raise FormatError(f"neural model format {c.config.get('format')!r}; this version reads "
                                  f"{' and '.join(map(str, FORMATS))}", path)
            config = NeuralConfig.from_json(c.config["net"])
            if config.shortlist and c.config["format"] < 2:
                raise FormatError("a shortlist in a format 1 model (shortlists came with format 2)")
            vocab = Vocabulary.from_arrays(c.arrays)
            if c.config.get("quantized"):
                params = dequantize_arrays(c, PARAM_NAMES, lazy)    # float16/int8 weights -> float32
            else:
                params = {n: c.arrays["param." + n] for n in PARAM_NAMES}
            structs = {n[len("struct."):]: v for n, v in c.arrays.items() if n.startswith("struct.")}
            net = cls(config, vocab, params, structs)
        except FormatError as e:
            if e.path is None:
                raise FormatError(str(e), path) from None
            raise
        except (KeyError, ValueError, TypeError) as e:
            raise FormatError(f"not a valid neural model ({e})", path) from None
        return (net, c) if return_container else net


def _default_threads():
    return max(1, min(2, os.cpu_count() or 1))


_blas_calls = None


def _blas_lib():
    """The set/get thread-count calls of the OpenBLAS behind scipy.linalg.cython_blas
    (found in this process's maps, where the first call loads it), or None."""
    global _blas_calls
    if _blas_calls is None:
        _blas.bind()
        _blas_calls = False
        try:
            with open("/proc/self/maps") as f:
                libs = {line.split()[-1] for line in f if "openblas" in line.lower() and ".so" in line}
            for path in sorted(libs):
                if "64_" in os.path.basename(path):
                    continue  # numpy's ILP64 copy, not scipy's
                lib = ctypes.CDLL(path)
                for prefix in ("scipy_openblas", "openblas"):
                    if hasattr(lib, prefix + "_set_num_threads") and hasattr(lib, prefix + "_get_num_threads"):
                        _blas_calls = (getattr(lib, prefix + "_set_num_threads"),
                                       getattr(lib, prefix + "_get_num_threads"))
                        break
                if _blas_calls:
                    break
        except OSError:
            _blas_calls = False
    return _blas_calls or None


def blas_threads():
    """OpenBLAS's thread count (1 for a BLAS without the call)."""
    lib = _blas_lib()
    return 1 if lib is None else max(1, int(lib[1]()))


def reserve_blas_buffer():
    """One small product, so that OpenBLAS holds a work buffer from now on (it keeps
    a buffer once it has one): run at load, after check_blas_room, because a first
    product that later finds no room left under an address-space limit retries its
    allocation without end instead of failing."""
    _blas.reserve_buffer()


def set_blas_threads(n):
    """Set OpenBLAS's thread count (a no-op for a BLAS without the call); returns the old one."""
    lib = _blas_lib()
    if lib is None:
        return None
    old = lib[1]()
    lib[0](int(n))
    return old


def _run_split(fn, n, threads):
    """Run fn(lo, hi, worker) over [0, n) in ``threads`` Python threads (the kernels release
    the GIL), BLAS single-threaded meanwhile: on a shared 2-core machine two independent
    single-threaded workers beat fork-join parallelism inside each call."""
    chunks = [(n * w // threads, n * (w + 1) // threads) for w in range(threads)]
    if threads == 1 or n < 2048:
        fn(0, n, 0)
        return
    old = set_blas_threads(1)
    errors = []

    def run(w):
        try:
            fn(chunks[w][0], chunks[w][1], w)
        except BaseException as e:
            errors.append(e)
    try:
        ts = [threading.Thread(target=run, args=(w,)) for w in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        if old is not None:
            set_blas_threads(old)
    if errors:
        raise errors[0]
