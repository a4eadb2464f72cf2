"""Small random networks of every kind, saved as nplm files, and an independent
numpy forward pass of the documented architecture (nplm/neural.py docstring)."""
import numpy as np

from nplm.neural.clusters import frequency_bins, huffman_tree
from nplm.neural.network import NeuralConfig, NeuralNet
from nplm.neural.vocab import SPECIALS, Vocabulary

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


def make_net(kind, order=4, seed=0):
    context, hidden, output, act = KINDS[kind]
    cfg = NeuralConfig(order=order, embedding_dim=8, hidden=hidden, context=context, output=output,
                       objective="mle", classes=5, activation=act)
    vocab = Vocabulary(WORDS, COUNTS)
    wc = frequency_bins(COUNTS, 5) if output == "class" else None
    tree = None
    if output == "tree":
        t = huffman_tree(COUNTS)
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
    V = len(net.vocab)
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
