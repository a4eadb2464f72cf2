"""What the tests share: where ../shared lives, reading its corpora, a quiet Config,
the command-line runner, and small random networks of every kind with independent
NumPy references of their forward pass."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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


def quiet_config():
    """An nplm.Config that prints nothing while loading."""
    import nplm
    cfg = nplm.Config()
    cfg.show_progress = False
    cfg.arpa_complain = nplm.ARPALoadComplain.NONE
    return cfg


def run_cli(*args, stdin=None, env=None, cwd=ROOT, check=False):
    """``python -m nplm ARGS`` in a fresh interpreter that imports this tree's nplm."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-m", "nplm", *map(str, args)], input=stdin, capture_output=True,
                          text=True, env=env, cwd=cwd, check=check)


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
