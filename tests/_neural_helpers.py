"""Shared helpers of the neural tests: tiny networks and pure-NumPy references."""
import numpy as np

from nplm.neural.network import PARAM_NAMES, NeuralConfig, NeuralNet
from nplm.neural.vocab import SPECIALS, Vocabulary

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
    word_class = (rng.permutation(V) % n_classes).astype(np.int32)
    if huffman_tree is not None:
        t = huffman_tree(counts)
        tree = (t.points, t.codes, t.lengths)
    else:
        tree = random_tree(V, rng)
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
    m, d = c.order - 1, c.embedding_dim
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
        V = len(net.vocab)
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
