"""What the tests share: where ../shared lives, reading its corpora, a quiet Config,
the command-line runner, and small random networks of every kind with independent
NumPy references of their forward pass."""

import lzma
import os
import random
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from hypothesis import strategies as st

from nplm.neural.clusters import frequency_bins, huffman_tree
from nplm.neural.network import PARAM_NAMES, NeuralConfig, NeuralNet
from nplm.neural.shortlist import Shortlist
from nplm.neural.vocab import SPECIALS, Vocabulary

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
REFERENCE = SHARED / "reference"
DATA = SHARED / "data"

# lmplz's reference ARPAs: (reference name, text, order, estimate() options), as
# ../shared/reference/README.md lists the commands that wrote them.
LMPLZ_CASES = [
    ("ptb5k.o2", "ptb5k.txt", 2, {}),
    ("ptb5k.o3", "ptb5k.txt", 3, {}),
    ("ptb5k.o4", "ptb5k.txt", 4, {}),
    ("ptb5k.o5", "ptb5k.txt", 5, {}),
    ("ptb5k.o3.nointerp-unigrams", "ptb5k.txt", 3, {"interpolate_unigrams": False}),
    ("ptb5k.o4.prune011", "ptb5k.txt", 4, {"prune": [0, 1, 1]}),
    ("wiki3k.o5", "wiki3k.txt", 5, {}),
    ("tiny200.o4.discount-fallback", "tiny200.txt", 4, {"discount_fallback": True}),
]


def need_shared():
    if not SHARED.is_dir():
        pytest.skip("../shared (reference ARPAs and corpora) is absent")


def kenlm_program(name):
    """Path of KenLM's own program ``name`` (lmplz, build_binary, query, filter,
    interpolate, count_ngrams, fragment), as tools/build_kenlm.sh builds it from the
    PyPI kenlm sdist: in $NPLM_KENLM_BIN, else in that script's default cache folder.
    CI builds them and sets NPLM_REQUIRE_KENLM_PROGRAMS, so there a missing program
    fails the test instead of skipping it."""
    folder = os.environ.get("NPLM_KENLM_BIN") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "nplm", "kenlm-0.3.0", "bin")
    path = os.path.join(folder, name)
    if os.access(path, os.X_OK):
        return path
    reason = f"KenLM's {name} is not built ({path}): run tools/build_kenlm.sh"
    if os.environ.get("NPLM_REQUIRE_KENLM_PROGRAMS"):
        pytest.fail(reason)
    pytest.skip(reason)


def installed_program(name):
    """Path of nplm's program ``name`` as pip installed it: a script beside this
    interpreter (setup.py's scripts, whose #!python pip rewrote).  The tests run in
    the environment nplm is installed in (README's test command), so its absence is a
    failure."""
    path = os.path.join(sysconfig.get_path("scripts"), name)
    assert os.access(path, os.X_OK), f"{path} is not installed: pip install -e . before the tests"
    return path


def need_reference():
    if not REFERENCE.is_dir():
        pytest.skip("../shared/reference (lmplz outputs) is absent")


def read_lines(path, unk_to="UNK", limit=None):
    """Lines of a corpus, with <unk> written as the references' UNK."""
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    if limit is not None:
        lines = lines[:limit]
    if unk_to is not None:
        lines = [line.replace("<unk>", unk_to) for line in lines]
    return lines


def linear_spec(path, models, weights):
    """Write an nplm interpolation spec mixing ``models`` (paths, or component dicts)
    linearly; its path."""
    import json
    with open(path, "w") as f:
        json.dump({"nplm": "interpolation", "version": 1, "mode": "linear",
                   "models": [m if isinstance(m, dict) else str(m) for m in models],
                   "weights": list(weights)}, f)
    return str(path)


def quiet_config(module=None):
    """A Config of ``module`` (nplm, or the real kenlm module) that prints nothing
    while loading."""
    if module is None:
        import nplm as module
    cfg = module.Config()
    cfg.show_progress = False
    cfg.arpa_complain = module.ARPALoadComplain.NONE
    return cfg


def run_cli(*args, stdin=None, env=None, cwd=ROOT, check=False, text=None, timeout=600):
    """``python -m nplm ARGS`` in a fresh interpreter that imports this tree's nplm.
    Output is text unless ``text=False`` or ``stdin`` is bytes."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    text = not isinstance(stdin, bytes) if text is None else text
    return subprocess.run([sys.executable, "-m", "nplm", *map(str, args)], input=stdin, capture_output=True,
                          text=text, env=env, cwd=cwd, check=check, timeout=timeout)


try:
    from nplm.neural.clusters import huffman_tree
except ImportError:  # clusters not built yet: a random full binary tree stands in
    huffman_tree = None


def random_tree(V, rng):
    """(points, codes, lengths) of a random full binary tree over V leaves, root first."""
    items = [("leaf", w) for w in range(V)]
    parent = {}
    nid = 0
    while len(items) > 1:
        i, j = sorted(rng.choice(len(items), 2, replace=False))[::-1]
        a, b = items.pop(i), items.pop(j)
        node = ("inner", nid)
        nid += 1
        parent[a], parent[b] = (node, 1), (node, 0)
        items.append(node)
    paths = []
    for w in range(V):
        p, x = [], ("leaf", w)
        while x in parent:
            node, code = parent[x]
            p.append((node[1], code))
            x = node
        paths.append(p[::-1])
    L = max(len(p) for p in paths)
    points = np.zeros((V, L), np.int32)
    codes = np.zeros((V, L), np.int8)
    lens = np.array([len(p) for p in paths], np.int32)
    for w, p in enumerate(paths):
        for l, (n, c) in enumerate(p):
            points[w, l], codes[w, l] = n, c
    return points, codes, lens


def tiny_net(seed=0, V=12, n_classes=3, **cfg):
    rng = np.random.default_rng(seed)
    cfg.setdefault("order", 3)
    cfg.setdefault("embedding_dim", 4)
    cfg.setdefault("hidden", (6, 5))
    cfg.setdefault("noise_samples", 5)
    config = NeuralConfig(**cfg)
    counts = rng.integers(1, 30, V)
    vocab = Vocabulary(list(SPECIALS) + [f"w{i}" for i in range(V - 4)], counts)
    shortlist = Shortlist.of(config, vocab)       # the output side's units, not words
    U, unit_counts = (shortlist.n_units, shortlist.unit_counts) if shortlist else (V, counts)
    word_class = (rng.permutation(U) % n_classes).astype(np.int32)
    if huffman_tree is not None:
        t = huffman_tree(unit_counts)
        tree = (t.points, t.codes, t.lengths)
    else:
        tree = random_tree(U, rng)
    net = NeuralNet.create(config, vocab, word_class=word_class, tree=tree, seed=seed + 1)
    # move away from the symmetric/zero initialisation so every path is exercised
    for n in PARAM_NAMES:
        p = net.params[n]
        p += rng.normal(0, 0.3, p.shape).astype(np.float32)
    return net


def reference_log_distribution(net, contexts):
    """ln p(w | context) for every word, straight from the definitions in float64."""
    c = net.config
    P = {n: net.params[n].astype(np.float64) for n in PARAM_NAMES}
    act = {"relu": lambda z: np.maximum(z, 0), "tanh": np.tanh, "identity": lambda z: z}[c.activation]
    _m, _d = c.order - 1, c.embedding_dim
    out = []
    for ctx in np.asarray(contexts):
        if c.context == "full":
            x = np.concatenate([P["emb"][w] for w in ctx])
            a = act(x @ P["ctx"] + P["b0"])
        else:
            a = act(sum(P["ctx"][j] * P["emb"][w] for j, w in enumerate(ctx)) + P["b0"])
        if P["w1"].size:
            a = act(a @ P["w1"] + P["b1"])
        if P["w2"].size:
            a = act(a @ P["w2"] + P["b2"])
        V = net.n_units          # output units (the words without a shortlist)
        if c.output == "softmax":
            s = P["out_w"] @ a + P["out_b"]
            lp = s - np.logaddexp.reduce(s)
        elif c.output == "class":
            st = net.structs
            cs = P["cls_w"] @ a + P["cls_b"]
            lc = cs - np.logaddexp.reduce(cs)
            lp = np.empty(V)
            for w in range(V):
                k = st["word_class"][w]
                rows = np.arange(st["class_start"][k], st["class_start"][k + 1])
                s = P["out_w"][rows] @ a + P["out_b"][rows]
                lp[w] = lc[k] + s[list(rows).index(st["word_pos"][w])] - np.logaddexp.reduce(s)
        else:
            st = net.structs
            lp = np.zeros(V)
            for w in range(V):
                for l in range(st["lengths"][w]):
                    node = st["points"][w, l]
                    s = P["out_w"][node] @ a + P["out_b"][node]
                    lp[w] += -np.logaddexp(0, -s) if st["codes"][w, l] else -np.logaddexp(0, s)
        out.append(lp)
    return np.array(out)


WORDS = list(SPECIALS) + [f"w{i}" for i in range(37)]
COUNTS = (np.arange(len(WORDS))[::-1] * 3 + 1).astype(np.int64)

KINDS = {
    # name: (context, hidden, output, activation)
    "softmax-full-2": ("full", (16, 8), "softmax", "relu"),
    "softmax-diag-0": ("diagonal", (), "softmax", "tanh"),
    "class-full-1": ("full", (12,), "class", "relu"),
    "class-diag-2": ("diagonal", (10, 6), "class", "identity"),
    "tree-full-1": ("full", (12,), "tree", "relu"),
    "tree-diag-1": ("diagonal", (9,), "tree", "tanh"),
}


def make_net(kind, order=4, seed=0, **shortlist):
    """A randomised net of one of the KINDS over WORDS; ``shortlist=N`` (and
    ``shortlist_input=True``) give it a shortlist output layer."""
    context, hidden, output, act = KINDS[kind]
    cfg = NeuralConfig(order=order, embedding_dim=8, hidden=hidden, context=context, output=output,
                       objective="mle", classes=5, activation=act, **shortlist)
    vocab = Vocabulary(WORDS, COUNTS)
    sl = Shortlist.of(cfg, vocab)
    counts = sl.unit_counts if sl else COUNTS          # the output units'
    wc = frequency_bins(counts, 5) if output == "class" else None
    tree = None
    if output == "tree":
        t = huffman_tree(counts)
        tree = (t.points, t.codes, t.lengths)
    net = NeuralNet.create(cfg, vocab, word_class=wc, tree=tree, seed=seed)
    return randomise(net, seed + 1)


def randomise(net, seed, scale=0.4):
    """Every parameter drawn from N(0, scale), away from the initialisation's zeros and
    symmetries so every code path sees real numbers; returns the net."""
    rng = np.random.default_rng(seed)
    for v in net.params.values():
        if v.size:
            v[...] = rng.normal(0, scale, v.shape).astype(np.float32)
    return net


def _lse(x):
    mx = x.max()
    return mx + np.log(np.exp(x - mx).sum())


def numpy_log_dist(net, ctx):
    """Natural-log p(w | ctx) for every w, ctx = m ids oldest first, float64."""
    p = {k: np.asarray(v, np.float64) for k, v in net.params.items()}
    c = net.config
    act = {"relu": lambda x: np.maximum(x, 0), "tanh": np.tanh, "identity": lambda x: x}[c.activation]
    x = p["emb"][np.asarray(ctx)]
    if c.context == "full":
        h = act(x.reshape(-1) @ p["ctx"] + p["b0"])
    else:
        h = act((p["ctx"] * x).sum(0) + p["b0"])
    if p["w1"].size:
        h = act(h @ p["w1"] + p["b1"])
    if p["w2"].size:
        h = act(h @ p["w2"] + p["b2"])
    V = net.n_units              # output units (the words without a shortlist)
    if c.output == "softmax":
        s = p["out_w"] @ h + p["out_b"]
        return s - _lse(s)
    out = np.empty(V)
    if c.output == "class":
        st = net.structs
        cs = p["cls_w"] @ h + p["cls_b"]
        lc = cs - _lse(cs)
        ws = p["out_w"] @ h + p["out_b"]           # rows in class order
        for w in range(V):
            k = st["word_class"][w]
            lo, hi = st["class_start"][k], st["class_start"][k + 1]
            out[w] = lc[k] + ws[st["word_pos"][w]] - _lse(ws[lo:hi])
        return out
    st = net.structs
    for w in range(V):
        total = 0.0
        for i in range(st["lengths"][w]):
            node = st["points"][w, i]
            z = p["out_w"][node] @ h + p["out_b"][node]
            z = z if st["codes"][w, i] else -z
            total += -np.log1p(np.exp(-z))
        out[w] = total
    return out


# ----------------------------------------------------------------------------- ARPA texts

def arpa_text(*sections, counts=None):
    counts = counts or [len(s) for s in sections]
    out = ["\\data\\"] + [f"ngram {i + 1}={c}" for i, c in enumerate(counts)] + [""]
    for i, s in enumerate(sections):
        out += [f"\\{i + 1}-grams:"] + list(s) + [""]
    return "\n".join(out + ["\\end\\"]) + "\n"


def srilm_variants(tmp_path):
    """SRILM-style rewrites of a reference ARPA: <s> at -99, back-off columns
    omitted where zero, and lower-order n-grams pruned although longer n-grams
    still end with them (KenLM then fills 'blank' entries with backed-off values)."""
    text = lzma.open(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz", "rt").read()
    header, body = text.split("\n\n", 1)
    sections = {}
    order = []
    for block in body.strip().split("\n\n"):
        lines = block.strip().split("\n")
        if lines[0].startswith("\\end"):
            continue
        n = int(lines[0][1])
        order.append(n)
        sections[n] = lines[1:]
    top = max(order)
    grams = {n: [l.split("\t") for l in sections[n]] for n in order}
    contexts = {n: {" ".join(f[1].split()[:-1]) for f in grams[n + 1]} for n in order if n < top}
    suffixes = {n: {" ".join(f[1].split()[1:]) for f in grams[n + 1]} for n in order if n < top}
    rng = random.Random(3)
    pruned = {}
    for n in order:
        keep = []
        for f in grams[n]:
            if n == 1 and f[1] == "<s>":
                f = ["-99"] + f[1:]
            if 1 < n < top and f[1] in suffixes[n] and f[1] not in contexts[n] and rng.random() < 0.5:
                continue
            if len(f) == 3 and float(f[2]) == 0.0:
                f = f[:2]
            keep.append(f)
        pruned[n] = keep

    def write(path, gram_sets):
        out = ["\\data\\"] + [f"ngram {n}={len(gram_sets[n])}" for n in order] + [""]
        for n in order:
            out.append(f"\\{n}-grams:")
            out += ["\t".join(f) for f in gram_sets[n]]
            out.append("")
        out.append("\\end\\")
        path.write_text("\n".join(out) + "\n")
        return str(path)

    full = {n: [(["-99"] + f[1:]) if (n == 1 and f[1] == "<s>") else f for f in grams[n]] for n in order}
    return [write(tmp_path / "srilm_full.arpa", full), write(tmp_path / "srilm_pruned.arpa", pruned)]


_LOGP = st.one_of(st.sampled_from(["0", "-0", "-1", "-99", "-2.25", "-inf", "-1e39"]),
                  st.floats(-4, 0, width=32).map(lambda f: repr(float(f))))
_BACKOFF = st.one_of(st.sampled_from([None, "0", "-0", "0.0", "-0.3", "0.2"]),
                     st.floats(-2, 1, width=32).map(lambda f: repr(float(f))))


@st.composite
def random_arpa(draw):
    """A back-off model of order 2-5 over a few words: every n-gram's context is an
    (n-1)-gram (else KenLM refuses it), but suffixes may be missing (KenLM then adds
    blanks); <unk> absent, spelt <UNK> or anywhere in the unigrams; <s> and </s> may
    appear anywhere in n-grams; probabilities 0, -0, -99, -inf; back-offs omitted,
    zero of either sign, positive."""
    order = draw(st.integers(2, 5))
    unk = draw(st.sampled_from(["<unk>", "<UNK>", None]))
    vocab = draw(st.permutations([f"w{i}" for i in range(draw(st.integers(1, 6)))] + ["<s>", "</s>"]
                                 + ([unk] if unk else [])))
    sections = [[(draw(st.sampled_from(["0", "-99", "-1", "-inf"]) if w == "<s>" else _LOGP), w, draw(_BACKOFF))
                 for w in vocab]]
    grams = [(w,) for w in vocab]
    for n in range(2, order + 1):
        chosen = sorted({draw(st.sampled_from(grams)) + (draw(st.sampled_from(vocab)),)
                         for _ in range(draw(st.integers(1, 12)))})
        sections.append([(draw(_LOGP), " ".join(g), draw(_BACKOFF) if n < order else None) for g in chosen])
        grams = chosen
    lines = [[p + "\t" + g + ("" if b is None else "\t" + b) for p, g, b in s] for s in sections]
    return arpa_text(*lines), [w for w in vocab]


def markov_text(path, n, seed, chain_seed=None):
    """Write n sentences of a small Markov chain over 40 words (three successors each)
    to ``path`` and return its name: something a network can learn.  The chain is drawn
    with ``chain_seed`` (texts of one language for several seeds), or without one from
    the sentences' own generator, first."""
    rng = np.random.default_rng(seed)
    nxt = (rng if chain_seed is None else np.random.default_rng(chain_seed)).integers(0, 40, size=(40, 3))
    lines = []
    for _ in range(n):
        w, words = int(rng.integers(40)), []
        for _ in range(int(rng.integers(3, 9))):
            words.append(f"w{w}")
            w = int(nxt[w, rng.integers(3)])
        lines.append(" ".join(words))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def zipf_text(path, seed, words, sentences, longest, offset=0):
    """Write ``sentences`` lines of 2 to ``longest - 1`` words drawn from a Zipf law
    over ``words`` words (named w<offset>, w<offset + 1>, ...) to ``path``."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, words + 1)
    with open(path, "w") as f:
        for _ in range(sentences):
            n = int(rng.integers(2, longest))
            f.write(" ".join(f"w{offset + w}" for w in rng.choice(words, size=n, p=p / p.sum())) + "\n")
