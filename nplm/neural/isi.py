"""The ISI NPLM toolkit's text model format (Vaswani et al. 2013; used by Moses).

A file is a sequence of sections, each a header line and its body up to a blank
line::

    \\config            "key value" lines: version 1, ngram_size, vocab_size (or
                       input_vocab_size + output_vocab_size), input_embedding_dimension,
                       num_hidden, output_embedding_dimension, activation_function
    \\vocab             one word per line (both vocabularies), or
    \\input_vocab / \\output_vocab
    \\input_embeddings  V_in rows of d values
    \\hidden_weights 1  num_hidden rows of (n-1)*d values       (absent when num_hidden is 0)
    \\hidden_biases 1   num_hidden values, one per line          (NPLM 0.3; optional)
    \\hidden_weights 2  output_embedding_dimension rows of num_hidden (or (n-1)*d) values
    \\hidden_biases 2   one per line                             (optional)
    \\output_weights    V_out rows of output_embedding_dimension values
    \\output_biases     V_out values, one per line
    \\end

The network (propagator.h)::

    x   = [E[w_1]; ...; E[w_{n-1}]]        context words oldest first
    h1  = f(U1 x + c1)                      f: rectifier, tanh or identity
    h2  = f(U2 h1 + c2)                     (h1 = x when num_hidden is 0)
    s   = W h2 + b                          log p(w | ctx) = s_w - log sum exp s   (natural log)

which is nplm's full-context network with hidden=(num_hidden, output_embedding_dimension)
(or hidden=(output_embedding_dimension,)), softmax output, ctx = U1^T, w1 = U2^T.

Supported: versions 1 (no hidden biases) and 0.3 (with them), separate input/output
vocabularies, rectifier/tanh/identity.  Not supported: hardtanh (nplm has no such
activation), premultiplied models (the toolkit never writes them).  nplm stores
float32, so values round to float32 (the toolkit computes in double).

Vocabularies: nplm's vocabulary is the union of both, specials first.  A word only
in the input vocabulary gets output weight 0 and bias -1e4 (probability 0, as the
toolkit cannot predict it); a word only in the output vocabulary gets the input
embedding of ``<unk>`` (the toolkit reads it as ``<unk>`` in a context).

Sentence starts: the toolkit (prepareNeuralLM's addStartStop, neuralLM::lookup_ngram)
pads a sentence-start context with ``<s>`` (``<s> <s> ... <s>``) and any other short
context with ``<null>``; nplm writes a sentence start as ``<null> ... <null> <s>``.  The
two agree for order 2 (the context is ``<s>``) and differ from order 3 on:

* toolkit file -> nplm: nplm's ``<null>`` gets the toolkit's ``<s>`` input embedding,
  so sentences score exactly as in the toolkit.  The toolkit's own ``<null>`` embedding
  and both word lists are kept in the nplm file, so converting back gives the original
  file's contents.
* nplm model -> toolkit file: one input embedding dimension more.  Every word's
  embedding gets a 0 there and ``<s>`` a 1, and the first layer a column per context
  position p: 0 for p = 0, U_{p-1} (E[<null>] - E[<s>]) for p >= 1 (U_p: the first layer's
  block for position p).  With k ``<s>`` the toolkit then sums
  sum_{p<k} (U_p E[<s>] + c_p) = sum_{p<k-1} U_p E[<null>] + U_{k-1} E[<s>], nplm's
  ``<null>^{k-1} <s>``, so the toolkit scores sentences as nplm does, and ``<null>``-padded
  contexts too.  Reading such a file back (the extra dimension recognised by that
  pattern, checked against the weights) drops the dimension again, so nplm -> ISI ->
  nplm gives the same weights.  A model whose ``<null>`` and ``<s>`` embeddings are
  equal needs no extra dimension.

Normalisation: the file does not say whether the model was trained with NCE (the
toolkit's default) and is meant to be read self-normalised (Moses does); it is
stored with objective "nce", so nplm gives exact normalised probabilities by
default and the self-normalised score (s_w, the toolkit's unnormalised lookup) when
asked.  Scores convert from natural log to log10.
"""
import warnings

import numpy as np

from nplm.errors import FormatError
from nplm.io.atomic import atomic_write
from nplm.io.files import open_text
from nplm.neural.network import NeuralConfig, NeuralNet, dummy_structs
from nplm.neural.vocab import SPECIALS, Vocabulary

_ACT_IN = {"rectifier": "relu", "tanh": "tanh", "identity": "identity"}
_ACT_OUT = {v: k for k, v in _ACT_IN.items()}
_NO_OUTPUT_BIAS = -1e4
_INT_KEYS = ("version", "ngram_size", "vocab_size", "input_vocab_size", "output_vocab_size",
             "input_embedding_dimension", "num_hidden", "output_embedding_dimension")


class IsiModel:
    """The contents of an ISI NPLM file, as float64 arrays in the toolkit's layout."""

    def __init__(self, config, input_words, output_words, arrays):
        self.config = config
        self.input_words = input_words
        self.output_words = output_words
        self.arrays = arrays   # input_embeddings, hidden_weights_1/2, hidden_biases_1/2, output_weights/biases
        self.start_dimension = False   # from_neural added the sentence-start dimension

    @property
    def ngram_size(self):
        return self.config["ngram_size"]

    def log_scores(self, contexts, normalised=True):
        """Natural-log scores (N, V_out) of the documented architecture, in float64
        numpy: the reference forward pass.  ``contexts`` are input-vocabulary ids."""
        a = self.arrays
        act = {"rectifier": lambda x: np.maximum(x, 0), "tanh": np.tanh,
               "identity": lambda x: x}[self.config["activation_function"]]
        x = a["input_embeddings"][np.asarray(contexts)].reshape(len(contexts), -1)
        if self.config["num_hidden"] > 0:
            x = act(x @ a["hidden_weights_1"].T + a["hidden_biases_1"])
        h = act(x @ a["hidden_weights_2"].T + a["hidden_biases_2"])
        s = h @ a["output_weights"].T + a["output_biases"]
        if normalised:
            m = s.max(axis=1, keepdims=True)
            s = s - (m + np.log(np.exp(s - m).sum(axis=1, keepdims=True)))
        return s


# ---------------------------------------------------------------------------------
# Reading and writing the text format.

def _sections(path):
    """(header, first body line number, body lines) for each section."""
    with open_text(path) as f:
        lines = f.read().split("\n")
    i = 0
    out = []
    while i < len(lines):
        head = lines[i].strip()
        i += 1
        if head == "":
            continue
        if head == "\\end":
            return out
        if not head.startswith("\\"):
            raise FormatError(f"expected a section header such as \\config, found {head[:60]!r}", path, i)
        start = i + 1
        body = []
        while i < len(lines) and lines[i].strip() != "":
            body.append(lines[i])
            i += 1
        out.append((head, start, body))
    raise FormatError("no \\end line (truncated file?)", path, len(lines))


def _matrix(path, start, body, rows, cols, name):
    if len(body) != rows:
        raise FormatError(f"section {name} has {len(body)} rows, the config says {rows}", path, start)
    if rows == 0:
        return np.zeros((0, cols))
    flat = " ".join(body).split()
    if len(flat) != rows * cols:
        for j, line in enumerate(body):
            if len(line.split()) != cols:
                raise FormatError(f"section {name}: {len(line.split())} values, expected {cols}", path, start + j)
    try:
        m = np.array(flat, dtype=np.float64).reshape(rows, cols)
    except ValueError:
        for j, line in enumerate(body):
            for tok in line.split():
                try:
                    float(tok)
                except ValueError:
                    raise FormatError(f"section {name}: {tok[:40]!r} is not a number", path, start + j) from None
        raise
    if not np.isfinite(m).all():
        j = int(np.flatnonzero(~np.isfinite(m).all(axis=1))[0])
        raise FormatError(f"section {name}: value is not finite", path, start + j)
    return m


def read_isi(path):  # noqa: C901 - the ISI text format's sections, each validated with its own message
    """Parse an ISI NPLM model file into an IsiModel (FormatError naming file:line)."""
    path = str(path)
    sections = _sections(path)
    config, words, bodies = {}, {}, {}
    for head, start, body in sections:
        if head == "\\config":
            for j, line in enumerate(body):
                parts = line.split()
                if len(parts) != 2:
                    raise FormatError(f"config line {line.strip()!r} is not 'key value'", path, start + j)
                key, value = parts
                if key in _INT_KEYS:
                    try:
                        config[key] = int(value)
                    except ValueError:
                        raise FormatError(f"config {key} must be an integer, not {value!r}", path, start + j) from None
                elif key == "activation_function":
                    if value not in _ACT_IN:
                        raise FormatError(f"activation function {value!r} is not supported "
                                          f"(nplm has {sorted(_ACT_IN)})", path, start + j)
                    config[key] = value
                # other keys: ignored, as the toolkit does
            config["_line"] = start
        elif head in ("\\vocab", "\\input_vocab", "\\output_vocab"):
            for j, line in enumerate(body):
                if len(line.split()) != 1:
                    raise FormatError("a vocabulary line must hold exactly one word", path, start + j)
            ws = [line.strip() for line in body]
            if head in ("\\vocab", "\\input_vocab"):
                words["input"] = ws
            if head in ("\\vocab", "\\output_vocab"):
                words["output"] = ws
        elif head in ("\\input_embeddings", "\\hidden_weights 1", "\\hidden_weights 2", "\\hidden_biases 1",
                      "\\hidden_biases 2", "\\output_weights", "\\output_biases"):
            bodies[head[1:].replace(" ", "_")] = (start, body)
        else:
            raise FormatError(f"unknown section {head!r}", path, start - 1)
    if not config:
        raise FormatError("no \\config section", path)
    if config.get("version", 1) != 1:
        raise FormatError(f"format version {config['version']}, expected 1", path, config["_line"])
    if "vocab_size" in config:
        config.setdefault("input_vocab_size", config["vocab_size"])
        config.setdefault("output_vocab_size", config["vocab_size"])
    config.setdefault("activation_function", "rectifier")   # the toolkit's default
    for key in ("ngram_size", "input_vocab_size", "output_vocab_size", "input_embedding_dimension",
                "num_hidden", "output_embedding_dimension"):
        if key not in config:
            raise FormatError(f"config lacks {key}", path, config["_line"])
        if config[key] < (2 if key == "ngram_size" else 0 if key == "num_hidden" else 1):
            raise FormatError(f"config {key} = {config[key]} is out of range", path, config["_line"])
    for side in ("input", "output"):
        if side not in words:
            raise FormatError(f"no \\vocab or \\{side}_vocab section", path)
        if len(words[side]) != config[f"{side}_vocab_size"]:
            raise FormatError(f"{side} vocabulary has {len(words[side])} words, the config says "
                              f"{config[f'{side}_vocab_size']}", path)
        if len(set(words[side])) != len(words[side]):
            raise FormatError(f"{side} vocabulary lists a word twice", path)
    m = config["ngram_size"] - 1
    d, H, r = config["input_embedding_dimension"], config["num_hidden"], config["output_embedding_dimension"]
    vin, vout = config["input_vocab_size"], config["output_vocab_size"]
    first = H if H > 0 else m * d
    shapes = {"input_embeddings": (vin, d), "hidden_weights_2": (r, first), "output_weights": (vout, r),
              "output_biases": (vout, 1), "hidden_biases_2": (r, 1)}
    if H > 0:
        shapes.update(hidden_weights_1=(H, m * d), hidden_biases_1=(H, 1))
    arrays = {}
    for name, shape in shapes.items():
        if name not in bodies:
            if name.startswith("hidden_biases"):
                arrays[name] = np.zeros(shape[0])
                continue
            raise FormatError(f"no \\{name.replace('_1', ' 1').replace('_2', ' 2')} section", path)
        start, body = bodies[name]
        a = _matrix(path, start, body, shape[0], shape[1], name)
        arrays[name] = a[:, 0] if "biases" in name else a
    extra = set(bodies) - set(shapes)
    if extra:
        raise FormatError(f"sections {sorted(extra)} do not fit num_hidden {H}", path)
    config.pop("_line", None)
    config["has_hidden_biases"] = any(n in bodies for n in ("hidden_biases_1", "hidden_biases_2"))
    return IsiModel(config, words["input"], words["output"], arrays)


def _fmt(a):
    return "\n".join(" ".join(f"{v:.9g}" for v in row) for row in np.atleast_2d(a))


def write_isi(model, path):
    """Write an IsiModel in the toolkit's text format (atomically)."""
    c, a = model.config, model.arrays
    same = model.input_words == model.output_words
    parts = ["\\config", "version 1", f"ngram_size {c['ngram_size']}"]
    if same:
        parts.append(f"vocab_size {len(model.input_words)}")
    parts += [f"input_vocab_size {len(model.input_words)}", f"output_vocab_size {len(model.output_words)}",
              f"input_embedding_dimension {c['input_embedding_dimension']}", f"num_hidden {c['num_hidden']}",
              f"output_embedding_dimension {c['output_embedding_dimension']}",
              f"activation_function {c['activation_function']}", ""]
    if same:
        parts += ["\\vocab"] + list(model.input_words) + [""]
    else:
        parts += ["\\input_vocab"] + list(model.input_words) + ["", "\\output_vocab"] + list(model.output_words) + [""]
    parts += ["\\input_embeddings", _fmt(a["input_embeddings"]), ""]
    biases = c.get("has_hidden_biases", True)
    if c["num_hidden"] > 0:
        parts += ["\\hidden_weights 1", _fmt(a["hidden_weights_1"]), ""]
        if biases:
            parts += ["\\hidden_biases 1", _fmt(a["hidden_biases_1"][:, None]), ""]
    parts += ["\\hidden_weights 2", _fmt(a["hidden_weights_2"]), ""]
    if biases:
        parts += ["\\hidden_biases 2", _fmt(a["hidden_biases_2"][:, None]), ""]
    parts += ["\\output_weights", _fmt(a["output_weights"]), "", "\\output_biases",
              _fmt(a["output_biases"][:, None]), "", "\\end", ""]
    with atomic_write(path, "wb") as f:
        f.write("\n".join(parts).encode("utf-8"))


# ---------------------------------------------------------------------------------
# Mapping to and from nplm's NeuralNet.

def _start_columns(first, e_null, e_s, m, d):
    """(rows, m) first-layer columns that make the toolkit's <s> ... <s> sum to nplm's
    <null> ... <null> <s> (module docstring); ``first`` is the (rows, m*d) first layer."""
    delta = np.asarray(e_null, np.float64) - np.asarray(e_s, np.float64)
    cols = np.zeros((first.shape[0], m))
    for p in range(1, m):
        cols[:, p] = first[:, (p - 1) * d:p * d] @ delta
    return cols


def _other_columns(m, D):
    """Mask of the first layer's (m*D) input columns without each position's last,
    the sentence-start dimension from_neural adds."""
    keep = np.ones(m * D, bool)
    keep[D - 1::D] = False
    return keep


def _has_start_dimension(model):
    """Whether the file's last input embedding dimension is the one from_neural adds
    for nplm's sentence start: 1 for <s>, 0 for every other word, and first-layer
    columns equal to _start_columns of the other dimensions (up to the text's
    rounding, relative to the sum of the terms)."""
    c, a = model.config, model.arrays
    m, D = c["ngram_size"] - 1, c["input_embedding_dimension"]
    words = model.input_words
    if m < 2 or D < 2 or "<s>" not in words or "<null>" not in words:
        return False
    E = a["input_embeddings"]
    s, n = words.index("<s>"), words.index("<null>")
    flag = np.zeros(len(words))
    flag[s] = 1.0
    if not np.array_equal(E[:, -1], flag):
        return False
    first = a["hidden_weights_1"] if c["num_hidden"] > 0 else a["hidden_weights_2"]
    d = D - 1
    want = _start_columns(first[:, _other_columns(m, D)], E[n, :d], E[s, :d], m, d)
    delta = np.abs(E[n, :d] - E[s, :d])
    for p in range(m):
        scale = np.abs(first[:, (p - 1) * D:(p - 1) * D + d]) @ delta if p else 0.0
        if np.any(np.abs(first[:, p * D + d] - want[:, p]) > 1e-6 * scale):
            return False
    return True


def to_neural(model):
    """(NeuralNet, extra_config, extra_arrays) for an IsiModel; save with
    ``net.save(path, extra_config, extra_arrays)`` so ``from_neural`` restores the
    original word lists and the toolkit's own <null> embedding."""
    c, a = model.config, model.arrays
    in_idx = {w: i for i, w in enumerate(model.input_words)}
    out_idx = {w: i for i, w in enumerate(model.output_words)}
    nplm_start = _has_start_dimension(model)
    if nplm_start:
        # written by from_neural: drop the sentence-start dimension and its columns
        D, m = c["input_embedding_dimension"], c["ngram_size"] - 1
        first = "hidden_weights_1" if c["num_hidden"] > 0 else "hidden_weights_2"
        a = dict(a, input_embeddings=a["input_embeddings"][:, :-1],
                 **{first: a[first][:, _other_columns(m, D)]})
        c = dict(c, input_embedding_dimension=D - 1)
    others = [w for w in model.output_words if w not in SPECIALS]
    others += [w for w in model.input_words if w not in SPECIALS and w not in out_idx]
    words = list(SPECIALS) + others
    V = len(words)
    d, H, r = c["input_embedding_dimension"], c["num_hidden"], c["output_embedding_dimension"]
    emb_in = a["input_embeddings"]
    unk_row = emb_in[in_idx["<unk>"]] if "<unk>" in in_idx else np.zeros(d)
    emb = np.empty((V, d))
    for i, w in enumerate(words):
        emb[i] = emb_in[in_idx[w]] if w in in_idx else unk_row
    if "<s>" in in_idx and c["ngram_size"] > 2 and not nplm_start:
        # sentence-start padding: the toolkit's <s> <s> ... = nplm's <null> ... <s>
        emb[3] = emb_in[in_idx["<s>"]]
    out_w = np.zeros((V, r))
    out_b = np.full(V, _NO_OUTPUT_BIAS)
    for i, w in enumerate(words):
        if w in out_idx:
            out_w[i] = a["output_weights"][out_idx[w]]
            out_b[i] = a["output_biases"][out_idx[w]]
    hidden = (H, r) if H > 0 else (r,)
    cfg = NeuralConfig(order=c["ngram_size"], embedding_dim=d, hidden=hidden, context="full",
                       activation=_ACT_IN[c["activation_function"]], output="softmax", objective="nce",
                       classes=0, variable_history=False)
    f32 = lambda x: np.ascontiguousarray(x, dtype=np.float32)  # noqa: E731
    z2, z1 = np.zeros((0, 0), np.float32), np.zeros(0, np.float32)
    if H > 0:
        p = {"ctx": f32(a["hidden_weights_1"].T), "b0": f32(a["hidden_biases_1"]),
             "w1": f32(a["hidden_weights_2"].T), "b1": f32(a["hidden_biases_2"])}
    else:
        p = {"ctx": f32(a["hidden_weights_2"].T), "b0": f32(a["hidden_biases_2"]), "w1": z2, "b1": z1}
    p.update(emb=f32(emb), w2=z2, b2=z1, out_w=f32(out_w), out_b=f32(out_b), cls_w=z2, cls_b=z1)
    net = NeuralNet(cfg, Vocabulary(words), p, dummy_structs(V))
    extra_config = {"isi": {"input_words": list(model.input_words), "output_words": list(model.output_words),
                            "num_hidden": H, "activation_function": c["activation_function"],
                            "has_hidden_biases": bool(c.get("has_hidden_biases", False)),
                            "sentence_start": "nplm" if nplm_start else "toolkit"}}
    extra_arrays = {}
    if "<null>" in in_idx and not nplm_start:
        extra_arrays["isi.null_embedding"] = f32(emb_in[in_idx["<null>"]])
    return net, extra_config, extra_arrays


def from_neural(net, extra_config=None, extra_arrays=None):
    """An IsiModel for a NeuralNet (full context, softmax output, at most two hidden
    layers).  With the ``isi`` metadata of a converted file the original word lists
    and <null> embedding come back."""
    c = net.config
    if net.shortlist is not None:
        raise ValueError("the ISI NPLM format has no shortlist (its output covers its output words only): "
                         "this network's shortlist cannot be converted")
    if c.context != "full" or c.output != "softmax" or len(c.hidden) not in (1, 2) or c.activation not in _ACT_OUT:
        raise ValueError(f"the ISI NPLM format holds full-context softmax networks with one or two hidden "
                         f"layers; this one has context={c.context!r}, output={c.output!r}, hidden={c.hidden}")
    p = {k: np.asarray(v, dtype=np.float64) for k, v in net.params.items()}
    meta = (extra_config or {}).get("isi")
    words = net.vocab.words
    idx = {w: i for i, w in enumerate(words)}
    if meta:
        in_words, out_words = meta["input_words"], meta["output_words"]
    else:
        in_words = out_words = list(words)
    emb = p["emb"][[idx[w] for w in in_words]]
    first = p["ctx"].T                      # (rows, m*d): the first linear layer
    m, d = c.order - 1, c.embedding_dim
    toolkit_start = bool(meta) and meta.get("sentence_start", "toolkit") == "toolkit"
    start_dim = False
    if toolkit_start:
        # undo the sentence-start mapping: nplm's <null> row holds the toolkit's <s>
        if "<null>" in in_words:
            j = in_words.index("<null>")
            null = (extra_arrays or {}).get("isi.null_embedding")
            if null is not None:
                emb[j] = np.asarray(null, np.float64)
    elif m >= 2 and "<s>" in in_words and "<null>" in in_words:
        # nplm's <null> ... <s> start, written for the toolkit's <s> ... <s>
        cols = _start_columns(first, p["emb"][idx["<null>"]], p["emb"][idx["<s>"]], m, d)
        if np.any(cols != 0):
            start_dim = True
            flag = np.zeros((len(in_words), 1))
            flag[in_words.index("<s>")] = 1.0
            emb = np.hstack([emb, flag])
            first = np.hstack([np.hstack([first[:, q * d:(q + 1) * d], cols[:, q:q + 1]]) for q in range(m)])
    H = c.hidden[0] if len(c.hidden) == 2 else 0
    r = c.hidden[-1]
    arrays = {"input_embeddings": emb,
              "output_weights": p["out_w"][[idx[w] for w in out_words]],
              "output_biases": p["out_b"][[idx[w] for w in out_words]]}
    if H > 0:
        arrays.update(hidden_weights_1=first, hidden_biases_1=p["b0"], hidden_weights_2=p["w1"].T,
                      hidden_biases_2=p["b1"])
    else:
        arrays.update(hidden_weights_2=first, hidden_biases_2=p["b0"])
    has_biases = bool(meta["has_hidden_biases"]) if meta else any(
        np.any(b != 0) for b in (p["b0"], p["b1"]) if b.size)
    config = {"ngram_size": c.order, "input_vocab_size": len(in_words), "output_vocab_size": len(out_words),
              "input_embedding_dimension": d + start_dim, "num_hidden": H, "output_embedding_dimension": r,
              "activation_function": _ACT_OUT[c.activation], "has_hidden_biases": has_biases}
    model = IsiModel(config, list(in_words), list(out_words), arrays)
    model.start_dimension = start_dim
    return model


def isi_to_nplm(src, dst):
    """Convert an ISI NPLM text file to an nplm neural binary."""
    net, extra_config, extra_arrays = to_neural(read_isi(src))
    net.save(dst, extra_config=extra_config, extra_arrays=extra_arrays)
    return net


def nplm_to_isi(src, dst, messages=None):
    """Convert an nplm neural binary (float32 or quantised) to the ISI text format.
    ``messages(text)`` hears what the file leaves out ("warning: ...") or adds
    ("note: ..."); by default the warnings are Python warnings and the notes dropped."""
    net, cont = NeuralNet.load(src, return_container=True)
    extra = {k: v for k, v in cont.arrays.items() if k.startswith("isi.")}
    model = from_neural(net, cont.config, extra)
    def say(text):
        if messages is not None:
            messages(text)
        elif text.startswith("warning"):
            warnings.warn(text, stacklevel=3)
    if model.start_dimension:
        d = net.config.embedding_dim
        say(f"note: the ISI file has input_embedding_dimension {d + 1}, one more than the model's {d}: "
            f"it lets the toolkit's '<s> <s> ...' sentence start score as nplm's '<null> ... <s>' (converting "
            f"back removes it)")
    if any(k.startswith("fallback.") for k in cont.arrays):
        say("warning: the precomputed normalisers (nplm precompute) have no place in the ISI format and are "
            "left out; normalization='fallback' needs nplm precompute again after converting back")
    if cont.config.get("quantized"):
        say(f"note: the ISI file holds the {cont.config['quantized']['dtype']} weights as float values; "
            "converting back gives a float32 model")
    write_isi(model, dst)
    return model
