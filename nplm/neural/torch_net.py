"""The neural n-gram network in PyTorch: the same parameters as nplm.neural.network
(names, shapes and layouts of PARAM_NAMES), its forward pass, exact log-probabilities,
the training losses (MLE and NCE for softmax and class-factored outputs, MLE for a
tree) and the AdaGrad/SGD updates of the Cython trainer.

Imported only by the torch engine (``nplm train --engine torch``); nothing else in
nplm imports torch.  The parameters live in a plain dict of tensors so that the same
functions score the raw weights and their moving average.

The embedding table and the output rows of NCE and tree outputs are updated sparsely,
as the Cython trainer does: a step gathers the rows it reads into leaf tensors, and
only those rows get gradients, optimiser state updates and weight decay.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

from nplm.neural.network import PARAM_NAMES, NeuralNet

EPS = 1e-8                      # AdaGrad's, inside the square root as in the kernels
BIASES = ("b0", "b1", "b2", "cls_b", "out_b")


class TorchNet(torch.nn.Module):
    """A NeuralNet's parameters as torch Parameters (same names and layouts) and its
    structure arrays as buffers.  ``forward(ctx, units)``: exact natural-log
    probabilities of output units after contexts of input rows."""

    def __init__(self, net, device="cpu"):
        super().__init__()
        self.config = net.config
        self.net = net                 # vocabulary, shortlist and structures, for saving
        for n in PARAM_NAMES:
            a = np.array(net.params[n], dtype=np.float32, copy=True)
            self.register_parameter(n, torch.nn.Parameter(torch.from_numpy(a).to(device), requires_grad=False))
        s = net.structs
        for n in ("word_class", "class_start", "class_words", "word_pos", "points", "codes", "lengths"):
            self.register_buffer(n, torch.from_numpy(np.asarray(s[n]).astype(np.int64)).to(device))
        if self.config.output == "class":
            self.register_buffer("row_class", self.word_class[self.class_words])
        self.sparse_out = self.config.output == "tree" or self.config.objective == "nce"

    def params(self):
        """{name: tensor} of the parameters."""
        return {n: getattr(self, n) for n in PARAM_NAMES}

    def forward(self, ctx, units):
        return exact_logprob(self.params(), self, ctx, units)

    def to_net(self, params=None):
        """A NeuralNet (nplm's own model object, saved by its own writer) holding
        ``params`` (default: this module's) as float32 numpy arrays."""
        params = self.params() if params is None else params
        arrays = {n: np.ascontiguousarray(params[n].detach().cpu().numpy(), dtype=np.float32) for n in PARAM_NAMES}
        return NeuralNet(self.net.config, self.net.vocab, arrays, self.net.structs)


# ------------------------------------------------------------------ forward

def _act(x, kind):
    if kind == "relu":
        return torch.relu(x)
    if kind == "tanh":
        return torch.tanh(x)
    return x


def hidden(P, config, X, dropout=0.0, input_dropout=0.0, train=False):
    """The last hidden layer (B, r) from context embeddings X (B, m, d)."""
    if train and input_dropout > 0:
        X = F.dropout(X, input_dropout, True)
    B = X.shape[0]
    if config.context == "full":
        a = X.reshape(B, -1) @ P["ctx"] + P["b0"]
    else:
        a = (X * P["ctx"]).sum(1) + P["b0"]
    a = _act(a, config.activation)
    if train and dropout > 0:
        a = F.dropout(a, dropout, True)
    for w, b in (("w1", "b1"), ("w2", "b2")):
        if P[w].numel():
            a = _act(a @ P[w] + P[b], config.activation)
            if train and dropout > 0:
                a = F.dropout(a, dropout, True)
    return a


def _tree_logprob(H, rows_w, rows_b, codes, mask):
    """Sum over each path of log sigmoid(+-score); rows_w (B, L, r), rows_b/codes/mask (B, L)."""
    s = torch.einsum("br,blr->bl", H, rows_w) + rows_b
    signed = torch.where(codes != 0, s, -s)
    return (F.logsigmoid(signed) * mask).sum(1)


def exact_logprob(P, S, ctx, units):
    """Exact natural-log p(unit | ctx) (float32) of every row; ``S`` holds the
    structures (a TorchNet)."""
    c = S.config
    with torch.no_grad():
        H = hidden(P, c, P["emb"][ctx])
        if c.output == "softmax":
            logits = H @ P["out_w"].T + P["out_b"]
            return torch.log_softmax(logits, 1).gather(1, units[:, None])[:, 0]
        if c.output == "class":
            cls = S.word_class[units]
            lc = torch.log_softmax(H @ P["cls_w"].T + P["cls_b"], 1).gather(1, cls[:, None])[:, 0]
            scores = H @ P["out_w"].T + P["out_b"]
            row = S.word_pos[units]
            own = scores.gather(1, row[:, None])[:, 0]
            blocked = scores.masked_fill(S.row_class[None, :] != cls[:, None], -math.inf)
            return lc + own - torch.logsumexp(blocked, 1)
        nodes = S.points[units]
        mask = (torch.arange(nodes.shape[1], device=nodes.device)[None, :] < S.lengths[units][:, None]).float()
        return _tree_logprob(H, P["out_w"][nodes], P["out_b"][nodes], S.codes[units], mask)


def score_examples(P, S, ctx, units, batch=1024):
    """exact_logprob over many examples, ``batch`` rows at a time (float64 numpy)."""
    out = np.empty(len(units), np.float64)
    dev = P["emb"].device
    for lo in range(0, len(units), batch):
        c = torch.from_numpy(np.asarray(ctx[lo:lo + batch], np.int64)).to(dev)
        u = torch.from_numpy(np.asarray(units[lo:lo + batch], np.int64)).to(dev)
        out[lo:lo + batch] = exact_logprob(P, S, c, u).double().cpu().numpy()
    return out


# ------------------------------------------------------------------ training losses

class Rows:
    """Rows of a table read by one step, gathered into a leaf tensor: ``ids`` (U,)
    distinct row ids, ``w`` (U, cols) with gradients, ``inv`` mapping each use to its
    row, ``b`` the matching bias entries (or None)."""

    def __init__(self, table, idx, bias=None):
        self.ids, self.inv = torch.unique(idx.reshape(-1), return_inverse=True)
        self.inv = self.inv.reshape(idx.shape)
        self.w = table[self.ids].detach().requires_grad_()
        self.b = bias[self.ids].detach().requires_grad_() if bias is not None else None

    def rows(self):
        return self.w[self.inv]

    def bias(self):
        return self.b[self.inv]


def _nce(H, wt, bt, kqt, wn, bn, kqn):
    """Per-example NCE loss; target rows wt (B, r), noise rows wn (k, r) shared by the
    batch or (B, k, r) per example; kq: log(k q) of each row."""
    st = (H * wt).sum(1) + bt - kqt
    if wn.dim() == 2:
        sn = H @ wn.T + bn - kqn
    else:
        sn = torch.einsum("br,bkr->bk", H, wn) + bn - kqn
    return F.softplus(-st) + F.softplus(sn).sum(1)


def output_loss(P, S, H, tgt, noise, rows):
    """Summed loss of a batch over the output layer; sparse row tables it reads are
    appended to ``rows`` as ("out", Rows).  ``noise``: NoiseDraw or None."""
    c = S.config
    if c.output == "tree":
        nodes = S.points[tgt]
        mask = (torch.arange(nodes.shape[1], device=nodes.device)[None, :] < S.lengths[tgt][:, None]).float()
        R = Rows(P["out_w"], nodes, P["out_b"])
        rows.append(("out", R))
        return -_tree_logprob(H, R.rows(), R.bias(), S.codes[tgt], mask).sum()
    if c.objective == "mle":
        if c.output == "softmax":
            return F.cross_entropy(H @ P["out_w"].T + P["out_b"], tgt, reduction="sum")
        cls = S.word_class[tgt]
        lc = F.cross_entropy(H @ P["cls_w"].T + P["cls_b"], cls, reduction="sum")
        scores = H @ P["out_w"].T + P["out_b"]
        row = S.word_pos[tgt]
        own = scores.gather(1, row[:, None])[:, 0]
        blocked = scores.masked_fill(S.row_class[None, :] != cls[:, None], -math.inf)
        return lc + (torch.logsumexp(blocked, 1) - own).sum()
    if c.output == "softmax":
        idx = torch.cat([tgt, noise.n1])
        R = Rows(P["out_w"], idx, P["out_b"])
        rows.append(("out", R))
        w, b = R.rows(), R.bias()
        B = tgt.shape[0]
        return _nce(H, w[:B], b[:B], noise.logkq[tgt], w[B:], b[B:], noise.logkq[noise.n1]).sum()
    # class-factored NCE: classes against k noise classes, words against k noise words of their class
    cls = S.word_class[tgt]
    cw, cb = P["cls_w"], P["cls_b"]
    lc = _nce(H, cw[cls], cb[cls], noise.logkq[cls], cw[noise.n1], cb[noise.n1], noise.logkq[noise.n1])
    row = S.word_pos[tgt]
    wnoise = noise.n2.reshape(-1, c.noise_samples)[cls]           # (B, k) rows of the target's class
    R = Rows(P["out_w"], torch.cat([row[:, None], wnoise], 1), P["out_b"])
    rows.append(("out", R))
    w, b = R.rows(), R.bias()
    lw = _nce(H, w[:, 0], b[:, 0], noise.logkq2[row], w[:, 1:], b[:, 1:], noise.logkq2[wnoise])
    return (lc + lw).sum()


class NoiseDraw:
    """One step's noise samples as tensors (from nplm.neural.train.Noise.draw)."""

    def __init__(self, drawn, consts):
        n1, _, n2, _ = drawn
        dev = consts[0].device
        self.n1 = torch.from_numpy(n1.astype(np.int64)).to(dev)
        self.n2 = torch.from_numpy(n2.astype(np.int64)).to(dev)
        self.logkq, self.logkq2 = consts


def noise_constants(noise, device):
    """(logkq, logkq2) of a Noise as tensors, made once."""
    return (torch.from_numpy(np.asarray(noise.logkq, np.float32)).to(device),
            torch.from_numpy(np.asarray(noise.logkq2, np.float32)).to(device))


def step_loss(P, S, ctx, tgt, noise, dropout, input_dropout, dense):
    """Forward pass of one training batch: (summed loss, row tables).  ``dense``: the
    parameter names read as whole tensors (they get .grad)."""
    rows = []
    E = Rows(P["emb"], ctx)
    rows.append(("emb", E))
    Q = {n: (P[n].detach().requires_grad_() if n in dense else P[n]) for n in PARAM_NAMES}
    H = hidden(Q, S.config, E.rows(), dropout, input_dropout, train=True)
    loss = output_loss(Q, S, H, tgt, noise, rows)
    return loss, rows, {n: Q[n] for n in dense}


def dense_names(S):
    """Parameters updated as whole tensors: every used one but the embeddings and (for
    NCE and tree outputs) the output rows and their biases."""
    out = []
    for n in PARAM_NAMES:
        if n == "emb" or (S.sparse_out and n in ("out_w", "out_b")):
            continue
        if getattr(S, n).numel():
            out.append(n)
    return out


# ------------------------------------------------------------------ updates

def _adagrad(p, g, acc, lr, l2):
    if l2:
        g = g + l2 * p
    acc = acc + g * g
    return p - lr * g / torch.sqrt(acc + EPS), acc


def update_dense(P, A, name, g, lr, l2, adagrad):
    """p -= lr * g' (SGD) or lr * g' / sqrt(acc += g'^2) (AdaGrad), g' = g + l2 p
    (no weight decay on biases)."""
    l2 = 0.0 if name in BIASES else l2
    p = P[name]
    with torch.no_grad():
        if adagrad:
            new, acc = _adagrad(p, g, A[name], lr, l2)
            A[name].copy_(acc)
            p.copy_(new)
        else:
            p.sub_(lr * (g + l2 * p) if l2 else lr * g)


def update_rows(P, A, name, ids, g, lr, l2, adagrad):
    """The same update on rows ``ids`` of table ``name`` only."""
    l2 = 0.0 if name in BIASES else l2
    with torch.no_grad():
        p = P[name][ids]
        if adagrad:
            new, acc = _adagrad(p, g, A[name][ids], lr, l2)
            A[name][ids] = acc
        else:
            new = p - lr * (g + l2 * p if l2 else g)
        P[name][ids] = new
