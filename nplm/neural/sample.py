"""Sampling sentences from a neural model (ancestral sampling, exact distribution).

Why: a back-off table distilled from a neural model can only hold the n-grams it
lists, and the training text lists none of the unseen n-grams where the network's
generalisation lives.  Text sampled from the network does (Deoras et al. 2011,
"Variational approximation of long-span language models"): its n-grams are the ones
the network finds likely, so ``nplm distil --sample N`` lists them.

How: many sentences are grown side by side.  Each step computes the hidden states of
all streams in one call of the query core, then draws every stream's next word,
by the inverse cumulative distribution or, for other class-output nets, by the
Gumbel-max trick (argmax of log p + Gumbel noise is a draw from p):

* class output: the class from the C class scores, then the word from the scores of
  that class's rows only.  A ReLU net draws both by the inverse of the cumulative
  distribution in the query core (``sample_class_rows``: the zero-skipping products of
  a single query, the streams grouped by drawn class); other nets by the Gumbel-max
  trick over one product per class;
* softmax / tree output: by the inverse cumulative distribution of each stream's exact
  distribution over V (one uniform per stream, not a Gumbel per word).

With a shortlist a class draw gives a unit; the out-of-shortlist unit then becomes a
word drawn by its unigram share (what the model gives those words).  The whole
distributions of softmax and tree outputs hold every word already.

A sentence starts from the context the query API uses after ``<s>`` (``<null>``
padding, then ``<s>``) and ends at ``</s>`` or at ``max_len`` words.  ``<s>``,
``</s>``-as-word and ``<null>`` are never emitted as words: a draw of ``<s>`` or
``<null>`` (which a trained net gives almost no mass) is redrawn, which samples
exactly from the distribution conditioned on a real word.

The token budget: sentences are started while fewer than N tokens have been drawn, and
every started one is finished and written in the order started (see
``sample_sentences``), so the text holds i.i.d. sentences, at least N tokens, and ends
at a sentence boundary.
"""
import numpy as np

from nplm.errors import FormatError
from nplm.io import container
from nplm.io.atomic import text_output
from nplm.io.progress import tqdm
from nplm.neural import query as neural_model
from nplm.neural.vocab import BOS, EOS, NULL


def _class_draw(net, H, rng):
    """Output units drawn from a class-output net for hidden states H (S, r)."""
    p, s = net.params, net.structs
    cls = H @ p["cls_w"].T
    cls += p["cls_b"]
    cls += rng.gumbel(size=cls.shape).astype(np.float32)
    c = np.argmax(cls, axis=1)
    out = np.empty(len(H), np.int32)
    order = np.argsort(c, kind="stable")
    bounds = np.searchsorted(c[order], np.arange(net.n_classes + 1))
    start, words = s["class_start"], s["class_words"]
    for k in np.flatnonzero(bounds[1:] > bounds[:-1]):
        rows = order[bounds[k]:bounds[k + 1]]
        lo, hi = int(start[k]), int(start[k + 1])
        sc = H[rows] @ p["out_w"][lo:hi].T
        sc += p["out_b"][lo:hi]
        sc += rng.gumbel(size=sc.shape).astype(np.float32)
        out[rows] = words[lo + np.argmax(sc, axis=1)]
    return out


def _words(net, units, rng):
    """Word ids of drawn output units: with a shortlist, a draw of the OOS unit becomes
    an out-of-shortlist word drawn by its unigram share, which is the model's
    distribution of those words."""
    if net.shortlist is None:
        return units
    return net.shortlist.words_of(units, rng)


def _full_draw(net, ctx, rng, rows=256):
    """Word ids drawn from the exact distribution (any output kind), by the inverse of
    each row's cumulative distribution (float64), ``rows`` rows at a time.  Gumbel-max
    drew a float64 Gumbel per word and row: at V = 33k with 4096 streams that was 5.6 s
    of a 7 s step and 1.6 GB of noise."""
    lp = net.log10_distribution(ctx)
    u = rng.random(len(ctx))
    out = np.empty(len(ctx), np.int32)
    for lo in range(0, len(ctx), rows):
        x = lp[lo:lo + rows]
        x = x - x.max(axis=1, keepdims=True)
        np.power(np.float32(10), x, out=x)
        cum = np.cumsum(x, axis=1, dtype=np.float64)
        # the first word whose cumulative mass reaches u * total (never a zero-mass word)
        out[lo:lo + rows] = np.count_nonzero(cum < (u[lo:lo + rows] * cum[:, -1])[:, None], axis=1)
    return out


def sample_sentences(data, n_tokens, seed=1, streams=4096, max_len=100, progress=None):  # noqa: C901 - one branch per output layer kind and stopping rule
    """Yield sampled sentences (lists of word strings), each an independent draw from
    the model, in the order they were started, until at least ``n_tokens`` tokens
    (words plus one ``</s>`` per sentence) are out; the last sentence is finished, so
    the text ends at a sentence boundary.  ``data`` is what ``neural_model.load``
    returns.  ``progress(n)`` is called with the tokens drawn at each step.

    Why this is exact: a sentence is started only while fewer than ``n_tokens`` tokens
    have been drawn (by finished sentences and the words so far of those in flight),
    and every started sentence is finished.  Whether sentence k starts depends on draws
    made before it, never on its own, so each sentence is a draw from the model and
    (Wald's identity) the tokens per sentence of the text average the model's expected
    length, whatever the budget.  Keeping only the sentences that had ended when the
    budget ran out, as before, kept the short ones and dropped the long ones.  Writing
    in the order of starting, not of ending, keeps short sentences from coming first.
    Fewer than ``streams`` sentences are in flight when the budget is near: about the
    tokens left over the tokens per finished sentence so far, and never more than
    have finished (or than the ceil(n_tokens / max_len) started first), so the text
    overshoots ``n_tokens`` by about one sentence per stream in flight at the end, not
    by ``streams`` sentences."""
    if n_tokens < 1:
        raise ValueError(f"number of tokens to sample must be positive, not {n_tokens}")
    if streams < 1 or max_len < 1:
        raise ValueError("streams and max_len must be positive")
    net, core = data.net, data.core
    words = net.vocab.words
    m = net.order - 1
    rng = np.random.default_rng(seed)
    start = np.array([NULL] * (m - 1) + [BOS], np.int32)
    ctx = np.tile(start, (streams, 1))
    sent = [[] for _ in range(streams)]
    seq = np.zeros(streams, np.int64)          # the sentence number each stream grows
    active = np.zeros(streams, bool)
    done = {}                                  # finished sentences waiting for earlier ones
    started = written = finished = drawn = 0
    class_out = net.config.output == "class"
    by_core = class_out and core.samples_classes

    def start_streams(k):
        nonlocal started
        free = np.flatnonzero(~active)[:k]
        ctx[free] = start
        seq[free] = np.arange(started, started + len(free))
        active[free] = True
        started += len(free)

    # before any sentence has ended, no more than one per max_len tokens
    first = min(streams, -(-n_tokens // max_len))
    start_streams(first)
    while True:
        idx = np.flatnonzero(active)
        if len(idx) == 0:
            break
        c = ctx[idx]
        if by_core:
            w = _words(net, net.structs["class_words"][core.sample_class_rows(c, rng.random((len(idx), 2)))], rng)
        elif class_out:
            w = _words(net, _class_draw(net, core.hidden(c), rng), rng)
        else:
            w = _full_draw(net, c, rng)
        step = 0
        for j in np.flatnonzero((w != BOS) & (w != NULL)):
            i, wi = int(idx[j]), int(w[j])
            end = wi == EOS
            if not end:
                sent[i].append(words[wi])
            step += 1
            if not end and len(sent[i]) >= max_len:
                step += 1                      # the </s> a cut sentence still counts
                end = True
            if end:
                done[int(seq[i])] = sent[i]
                sent[i] = []
                active[i] = False
                finished += 1
            else:
                ctx[i, :-1] = ctx[i, 1:]
                ctx[i, -1] = wi
        drawn += step
        if progress is not None and step:
            progress(step)
        while written in done:
            yield done.pop(written)
            written += 1
        if drawn < n_tokens and finished:
            # in flight: about the sentences the tokens left need, at the tokens per
            # finished sentence so far (decided from past draws only)
            want = min(streams, -(-(n_tokens - drawn) * finished // drawn))
            # and no more in flight than have finished (or than at first): the first
            # sentences to end are the short ones, so an estimate from a few of them
            # started many too many at a small budget (100 tokens gave 292)
            want = min(want, max(first, finished))
            n_active = int(active.sum())
            if want > n_active:
                start_streams(want - n_active)
    assert not done and written == started


def sample_to_file(path, out, n_tokens, seed=1, max_len=100, streams=4096, progress=True):
    """Write sampled sentences, one per line, atomically to ``out`` (compressed by the
    extension; '-' is stdout); returns the number of sentences and tokens written."""
    if not container.is_container(path):
        raise FormatError("sampling needs a neural nplm model (nplm train's output)", path)
    data = neural_model.load(path)
    n_sent = n_tok = 0
    with tqdm(total=n_tokens, unit="tok", unit_scale=True, desc="sample", disable=not progress) as bar, \
            text_output(out, text=True) as f:
        for s in sample_sentences(data, n_tokens, seed=seed, max_len=max_len, streams=streams,
                                    progress=bar.update):
            f.write(" ".join(s) + "\n")
            n_sent += 1
            n_tok += len(s) + 1
    return n_sent, n_tok
