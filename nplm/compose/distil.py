"""Distillation of any model into a normalised back-off n-gram table (ARPA).

Which n-grams are listed: every word of the teacher's vocabulary as a unigram, plus
the n-grams of a text (or of an existing back-off model), each order with its own
count threshold, optionally plus the n-grams of a text sampled from the teacher
(``nplm sample``; the unseen n-grams where a network's generalisation lives) and
every frequent context's ``top_k`` most probable continuations (among the words seen
after its shorter context).  The set is then closed under prefixes and suffixes, so
every listed n-gram's context and lower-order n-gram are listed too (KenLM needs the former;
exact back-off weights need the latter).

Where the numbers come from: the probability of a listed n-gram (h, w) is the
teacher's log10 p(w | h), the context given to the teacher as a state built from h
(``context_state``, KenLM's GetState), through the LMCore protocol, so back-off,
neural and interpolated teachers work alike.  Back-off weights are then chosen so
every context's distribution sums to one:

    bow(h) = (1 - sum_listed p(w | h)) / (1 - sum_listed p_lower(w | h'))

where p_lower is the *distilled* lower-order probability (listed, by the suffix
closure).  Lower orders are computed first.

Special words: ``<s>`` is never predicted: no n-gram ends with it and its unigram
log10 probability is copied from the teacher (lmplz writes 0), clipped to [-99, 0];
every other context's distribution is over the vocabulary minus ``<s>``.  ``<unk>``
is an ordinary word (the teacher's probability of an unknown word); text words the
teacher does not know become ``<unk>``.  The neural padding token ``<null>`` is not
a word of the distilled model.  The unigram distribution is renormalised over the
vocabulary minus ``<s>`` (a no-op for a normalised teacher).

Continuation (``continuation=1``, after pruning): the unigram probabilities are
replaced by the shape backing off needs, fitted to the teacher's leftover mass of the
one-word contexts with the bows' renormalisation (nplm/continuation.py); higher orders
can be reshaped by the leftover-mass ratio (``continuation=k``), which measured worse
on PTB.

Relative-entropy pruning (Stolcke 1998) removes the n-grams whose removal changes
the model least, D = P(h) [p log(p / p') + (1 - sum_listed p(.|h)) log(bow / bow')],
keeping every n-gram that is the context or the lower-order n-gram of a kept one;
the threshold is found by bisection so the table meets a target n-gram count.
P(h) is the distilled model's own chain-rule probability of h, with P(<s>) taken
as the unigram probability of </s> (one sentence start per sentence end).

Memory: the distinct n-grams of the text (before thresholds) and the listed ones,
as flat numpy arrays; no Python object per n-gram.
"""
import math
import os
import warnings

import numpy as np
from tqdm import tqdm

from nplm._kernels import thread_count
from nplm.backoff.arpa import read_arpa, write_arpa
from nplm.backoff.binary import build_binary
from nplm.backoff.tables import NGramTables, chain_log10P, expand_ranges, row_groups
from nplm.compose import continuation as cont
from nplm.compose._distil import GramCounter, probe_groups  # noqa: F401 (probe_groups: for nplm.convert)
from nplm.errors import FormatError
from nplm.io.atomic import same_file
from nplm.io.text import split_words, utf8_lines
from nplm.model import ARPALoadComplain, Config, Model
from nplm.neural.query import exact_network_of, network_of
from nplm.neural.vocab import NULL

try:
    from nplm.compose import _distil
except ImportError as e:  # pragma: no cover - build problem
    raise ImportError("nplm._distil is not built; run `python setup.py build_ext --inplace` "
                      f"in the source tree ({e})") from None

_EPS = 1e-7          # probability mass kept back for unlisted words
_MIN_DEN = 1e-12     # smallest back-off denominator (lower-order mass left)
_CHUNK_LINES = 200_000


def _unique(a):
    """Sorted unique values (np.unique's hash path is slow on tens of millions)."""
    a = np.sort(a)
    if len(a) == 0:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


class Structure:
    """Listed n-grams of orders 1..N in teacher word ids.

    Order n's n-grams are sorted by ``keys[n] = prefix[n] * V + word[n]`` where
    ``prefix[n]`` is the index of the n-gram's first n-1 words in order n-1 and
    ``suffix[n]`` the index of its last n-1 words in order n-1.  Order 1 is the
    whole vocabulary (index = word id)."""

    def __init__(self, V, order):
        self.V = V
        self.order = order
        self.keys = {}
        self.prefix = {}
        self.word = {}
        self.suffix = {}

    def count(self, n):
        return self.V if n == 1 else len(self.keys[n])

    def rows(self, n):
        """(count, n) int32 word ids, oldest first."""
        if n == 1:
            return np.arange(self.V, dtype=np.int32)[:, None]
        lower = self.rows(n - 1)
        return np.ascontiguousarray(np.column_stack([lower[self.prefix[n]], self.word[n]]), dtype=np.int32)

    def index(self, rows):
        """Index of each row (oldest first) in its order's table, -1 where absent."""
        rows = np.asarray(rows)
        idx = rows[:, 0].astype(np.int64)
        ok = np.ones(len(idx), dtype=bool)
        for k in range(1, rows.shape[1]):
            table = self.keys[k + 1]
            if len(table) == 0:
                return np.full(len(idx), -1, np.int64)
            key = idx * self.V + rows[:, k]
            pos = np.minimum(np.searchsorted(table, key), len(table) - 1)
            ok &= table[pos] == key
            idx = np.where(ok, pos, 0)
        return np.where(ok, idx, -1)


def build_structure(V, rows_by_order):
    """A Structure from row arrays per order (n >= 2; duplicates allowed).  The rows
    are closed under prefixes and suffixes first."""
    order = max([1] + [n for n, r in rows_by_order.items() if len(r)])
    rows = {n: [np.asarray(rows_by_order.get(n, np.zeros((0, n), np.int32)), dtype=np.int32).reshape(-1, n)]
            for n in range(2, order + 1)}
    for n in range(order, 2, -1):
        r = np.concatenate(rows[n])
        rows[n] = [r]
        rows[n - 1] += [r[:, :-1], r[:, 1:]]
    s = Structure(V, order)
    for n in range(2, order + 1):
        r = np.concatenate(rows[n])
        if n == 2:
            pidx = r[:, 0].astype(np.int64)
        else:
            pidx = s.index(r[:, :-1])
            assert (pidx >= 0).all(), "prefix closure violated"
        keys = _unique(pidx * V + r[:, -1])
        s.keys[n] = keys
        s.prefix[n] = keys // V
        s.word[n] = (keys % V).astype(np.int32)
        if n == 2:
            s.suffix[n] = s.word[n].astype(np.int64)
        else:
            skey = s.suffix[n - 1][s.prefix[n]] * V + s.word[n]
            spos = np.searchsorted(s.keys[n - 1], skey)
            assert np.array_equal(s.keys[n - 1][np.minimum(spos, len(s.keys[n - 1]) - 1)], skey), \
                "suffix closure violated"
            s.suffix[n] = spos
    return s


# ---------------------------------------------------------------------------------
# Counting the n-grams of a text.

def _sentence_ids(path, vocab, bos, eos, forbidden):
    """Token id arrays of the text's lines in chunks: (flat ids with <s>/</s> around
    each sentence, sentence start offsets)."""
    buf, starts, pos = [], [], 0
    for line_no, line in enumerate(utf8_lines(path), 1):   # invalid UTF-8: an error naming the line
        words = split_words(line)
        for w in words:
            if w in forbidden:
                raise FormatError(f"the text contains the reserved token {w!r}", path, line_no)
        ids = vocab.ids(words) if words else np.zeros(0, np.int32)
        starts.append(pos)
        buf.append(np.concatenate([[bos], ids, [eos]]).astype(np.int32))
        pos += len(ids) + 2
        if len(starts) >= _CHUNK_LINES:
            yield np.concatenate(buf), np.asarray(starts, np.int64)
            buf, starts, pos = [], [], 0
    if starts:
        yield np.concatenate(buf), np.asarray(starts, np.int64)


def count_text(path, vocab, order, V, bos, eos, forbidden=(), progress=False, min_counts=None):
    """{n: (rows (count, n) int32, counts int64)} for n = 2..order: the n-grams of the
    text with one <s> before and </s> after each line (never ending in <s>), in order of
    first sight; with ``min_counts`` ({n: c}) only those seen at least c times.  Counted
    by one hash table per order (nplm._distil.GramCounter)."""
    counter = GramCounter(order, V)
    chunks = _sentence_ids(path, vocab, bos, eos, forbidden)
    if progress:
        chunks = tqdm(chunks, desc="count n-grams", unit="chunk")
    for ids, starts in chunks:
        counter.add(ids, starts)
    return counter.result(min_counts)


# ---------------------------------------------------------------------------------
# Teacher access and back-off weights.

def _load(model):
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        cfg = Config()
        cfg.show_progress = False
        cfg.arpa_complain = ARPALoadComplain.NONE
        return Model(model, cfg)
    return model


def _score(model, rows, threads, id_map=None):
    """Teacher log10 probabilities of rows of teacher ids (``id_map``: teacher id ->
    this model's id, for a lower-order teacher with its own vocabulary order)."""
    out = np.empty(len(rows), np.float32)
    if id_map is not None:
        rows = id_map[rows]
    net = _exact_network(model)
    if net is not None and len(rows):
        return _score_network(net, rows)
    if len(rows):
        _distil.score_rows(model.core, np.ascontiguousarray(rows, dtype=np.int32), out, threads)
    return out


def _warn_short_histories(teacher, order, has_lower):
    """Warn when the table needs a neural teacher's short histories and the teacher
    never trained on them.  Without --variable-history a network sees <null> padding
    only before <s>, so p(w | h) for a shorter h is poor: on WikiText-2 a 5-gram net
    (test perplexity 406) distilled to order 3 gave 3006."""
    net = network_of(teacher)
    if net is None or net.config.variable_history:
        return
    n = net.config.order
    if order < n:
        need = f"every order of a {order}-gram table uses them: distil at --order {n} (with --lower)"
    elif not has_lower:
        need = (f"orders 1..{n - 1} of the table use them: take those from another model with --lower "
                "(lower_teacher=), e.g. a Kneser-Ney model of the same text")
    else:
        return
    warnings.warn(f"the neural teacher {os.path.basename(os.fsdecode(teacher.path))} was trained without "
                  f"--variable-history, so its probabilities after histories shorter than {n - 1} words "
                  f"are poor, and {need}", stacklevel=3)


def _exact_network(model):
    """The NeuralNet behind an exactly normalised full-softmax neural nplm.Model, else
    None.  Its batched kernels normalise many contexts at once (GEMM) where the query
    core computes a V-wide normaliser per state (13x slower at V = 10k); the numbers
    are the same (tests/test_distil.py).  Class and tree outputs are cheap per state,
    and the core (with its first-layer tables) is the faster path for them."""
    net = exact_network_of(model)
    if net is None or net.config.output != "softmax":
        return None
    return net


def _score_network(net, rows, batch=1 << 16):
    """log10 p(last | rest) per row, the context given to the network as the query
    core does: the last n-1 words, <null> before the first (so a context starting
    with <s> is the sentence start <null> ... <null> <s>)."""
    m = net.order - 1
    k = rows.shape[1] - 1
    ctx = np.full((len(rows), m), NULL, np.int32)
    use = min(k, m)
    if use:
        ctx[:, m - use:] = rows[:, k - use:k]
    out = np.empty(len(rows), np.float32)
    for lo in range(0, len(rows), batch):
        out[lo:lo + batch] = net.log10_prob(ctx[lo:lo + batch], rows[lo:lo + batch, k])
    return out


def _vocab_map(words, model):
    """Ids in ``model`` of ``words``; raises when a word other than <null> is unknown
    to it (the two models would disagree about what <unk> covers)."""
    ids = model.vocab.ids(words).astype(np.int32)
    missing = [w for w, i in zip(words, ids) if i == 0 and w not in ("<unk>", "<null>")]
    if missing:
        raise ValueError(f"the lower-order teacher lacks {len(missing)} words of the teacher's vocabulary "
                         f"(first: {missing[0]!r}); both must share one vocabulary")
    return ids


def compute_backoffs(s, logprob, predictable):
    """log10 back-off weights per order (float64) for a Structure and its log10
    probabilities; rescales, in place, any context whose listed continuations take
    more than 1 - 1e-7 of the mass (so unlisted words keep some)."""
    p = {n: np.power(10.0, logprob[n].astype(np.float64)) for n in logprob}
    # Unigrams over the predictable vocabulary sum to one.
    total = p[1][predictable].sum()
    p[1][predictable] /= total
    logprob[1][predictable] = np.log10(p[1][predictable])
    n_pred = int(predictable.sum())
    for n in range(2, s.order + 1):
        ctx = s.prefix[n]
        mass = np.bincount(ctx, weights=p[n], minlength=s.count(n - 1))
        width = np.bincount(ctx, minlength=s.count(n - 1))
        full = width >= n_pred          # lists every predictable word: normalise exactly
        over = (mass > 1 - _EPS) & ~full
        scale = np.ones_like(mass)
        scale[full] = 1.0 / np.maximum(mass[full], 1e-300)
        scale[over] = (1 - _EPS) / mass[over]
        fix = scale[ctx] != 1.0
        if fix.any():
            p[n][fix] *= scale[ctx[fix]]
            logprob[n][fix] = np.log10(p[n][fix])
    bows = {}
    for n in range(1, s.order):
        ctx = s.prefix[n + 1]
        num = 1.0 - np.bincount(ctx, weights=p[n + 1], minlength=s.count(n))
        den = 1.0 - np.bincount(ctx, weights=p[n][s.suffix[n + 1]], minlength=s.count(n))
        num = np.maximum(num, 0.0)
        den = np.maximum(den, _MIN_DEN)
        with np.errstate(divide="ignore"):
            b = np.log10(num) - np.log10(den)
        width = np.bincount(ctx, minlength=s.count(n))
        b[width >= n_pred] = 0.0            # never backs off
        b[~np.isfinite(b)] = -99.0
        bows[n] = b
    bows[s.order] = np.zeros(s.count(s.order))
    return bows, p


# ---------------------------------------------------------------------------------
# Relative-entropy pruning.

def _prune_scores(s, logprob, p, bos, eos):
    """Stolcke's D for every n-gram of order >= 2 (natural-log units)."""
    ln10 = math.log(10.0)
    logP = chain_log10P(s, logprob, bos, eos, s.order - 1)
    D = {}
    for n in range(2, s.order + 1):
        ctx = s.prefix[n]
        num = np.maximum(1.0 - np.bincount(ctx, weights=p[n], minlength=s.count(n - 1)), 0.0)
        den = np.maximum(1.0 - np.bincount(ctx, weights=p[n - 1][s.suffix[n]], minlength=s.count(n - 1)),
                         _MIN_DEN)
        pw, q = p[n], p[n - 1][s.suffix[n]]
        num_c, den_c = num[ctx], den[ctx]
        bow_new = (num_c + pw) / (den_c + q)
        with np.errstate(divide="ignore", invalid="ignore"):
            # the pruned word now gets bow' q instead of p; every unlisted word
            # (mass num) bow'/bow times its old probability
            term = pw * (np.log(pw) - np.log(bow_new * q))
            term += np.where(num_c > 0, num_c * (np.log(np.maximum(num_c / den_c, 1e-300)) - np.log(bow_new)),
                             0.0)
        D[n] = np.exp(logP[n - 1][ctx] * ln10) * term
    return D


def _keep_masks(s, D, theta):
    """Which n-grams survive threshold ``theta``: top-down, an n-gram with D below
    it goes unless a kept longer n-gram has it as context or as lower-order n-gram."""
    keep = {}
    needed = None
    for n in range(s.order, 1, -1):
        k = D[n] >= theta
        if needed is not None:
            k |= needed
        keep[n] = k
        needed = np.zeros(s.count(n - 1), dtype=bool)
        needed[s.prefix[n][k]] = True
        needed[s.suffix[n][k]] = True
    return keep


def prune_structure(s, logprob, p, target, bos, eos):
    """(Structure, logprob) after pruning to at most ``target`` n-grams of orders
    >= 2 (unigrams are never pruned)."""
    total = sum(s.count(n) for n in range(2, s.order + 1))
    if target >= total:
        return s, logprob
    D = _prune_scores(s, logprob, p, bos, eos)
    cands = _unique(np.concatenate([D[n] for n in range(2, s.order + 1)]))
    cands = np.append(cands, np.inf)
    lo, hi = 0, len(cands) - 1          # kept(cands[hi]) <= target always (inf prunes all it may)
    while lo < hi:
        mid = (lo + hi) // 2
        kept = sum(int(k.sum()) for k in _keep_masks(s, D, cands[mid]).values())
        if kept <= target:
            hi = mid
        else:
            lo = mid + 1
    keep = _keep_masks(s, D, cands[hi])
    rows = {n: s.rows(n)[keep[n]] for n in range(2, s.order + 1)}
    new = build_structure(s.V, rows)
    new_lp = {1: logprob[1]}
    for n in range(2, new.order + 1):
        # build_structure sorts by the same keys, so the kept rows keep their order
        new_lp[n] = logprob[n][keep[n]]
    return new, new_lp


# ---------------------------------------------------------------------------------
# The driver.

def _per_order(value, order, name):
    if value is None:
        return {n: 1 for n in range(2, order + 1)}
    if isinstance(value, int):
        value = [value] * (order - 1)
    value = list(value)
    if len(value) > order - 1:
        raise ValueError(f"{name} has {len(value)} entries for orders 2..{order}")
    value = value + [value[-1] if value else 1] * (order - 1 - len(value))
    if any(int(v) < 1 for v in value):
        raise ValueError(f"{name} must be at least 1, not {value}")
    return {n: int(v) for n, v in zip(range(2, order + 1), value)}


def _top_by_distribution(net, words, candidates, k, batch=256):
    """Rows (w, c) for the ``k`` most probable candidates c after each one-word context
    w, best first: whole distributions in blocks (GEMM), not one query per (w, c) pair,
    which is V^2 queries for the one-word contexts (4.1 s against 0.14 s for 500
    contexts of PTB's default model)."""
    k = min(k, len(candidates))
    out = []
    for lo in range(0, len(words), batch):
        w = words[lo:lo + batch]
        ctx = np.full((len(w), net.config.order - 1), NULL, np.int32)
        ctx[:, -1] = w
        scores = net.log10_distribution(ctx)[:, candidates]
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        best = np.take_along_axis(scores, top, axis=1)
        top = np.take_along_axis(top, np.argsort(-best, axis=1, kind="stable"), axis=1)
        out.append(np.column_stack([np.repeat(w, k), candidates[top].reshape(-1)]).astype(np.int32))
    return np.concatenate(out) if out else np.zeros((0, 2), np.int32)


def _top_continuations(model, ctx, lower_rows, candidates, k, threads, chunk=1 << 21):
    """The ``k`` most probable words (by ``model``) after each context row of ``ctx``.
    Candidates: the words seen after the context's last m-1 words (rows of
    ``lower_rows``, whose last column is the word), or all ``candidates`` for
    one-word contexts.  Scored in batches through the teacher."""
    m = ctx.shape[1]
    if len(ctx) == 0:
        return np.zeros((0, m + 1), np.int32)
    net = exact_network_of(model)
    if m == 1 and net is not None:
        return _top_by_distribution(net, ctx[:, 0], candidates, k)
    if m == 1:
        per = np.full(len(ctx), len(candidates), np.int64)
    else:
        cg, lg = row_groups(ctx[:, 1:], lower_rows[:, :-1])
        lo_order = np.argsort(lg, kind="stable")
        lg_sorted = lg[lo_order]
        starts = np.searchsorted(lg_sorted, cg, "left")
        per = np.searchsorted(lg_sorted, cg, "right") - starts
    out = []
    for idx, j in expand_ranges(per, chunk):
        if m == 1:
            words = candidates[j]
        else:
            words = lower_rows[lo_order[starts[idx] + j], -1]
        rows = np.column_stack([ctx[idx], words]).astype(np.int32)
        score = _score(model, rows, threads)
        o = np.lexsort((-score, idx))
        idx_s = idx[o]
        first = np.searchsorted(idx_s, idx_s, "left")
        rank = np.arange(len(idx_s)) - first
        out.append(rows[o][rank < k])
    return np.concatenate(out) if out else np.zeros((0, m + 1), np.int32)


def distil(teacher, order, text=None, *, ngrams=None, min_count=None, sample_text=None,  # noqa: C901 - runs the distillation stages in order, each optional step in its place
           sample_min_count=None, top_k=0, top_k_min_count=2, lower_teacher=None, prune_to=None,
           continuation=False, threads=1, progress=False):
    """Distil ``teacher`` (an nplm.Model or a model path) into NGramTables of ``order``.

    Parameters
    ----------
    teacher : Model or str
        Any model nplm loads: ARPA, back-off or neural binary, interpolation spec.
    order : int
        The order of the table.
    text : str, optional
        Training text whose n-grams are listed (one sentence per line).
    ngrams : NGramTables or str, optional
        A back-off model (or ARPA path) whose n-grams are listed too.
    min_count : int or list of int, optional
        Per-order count thresholds for the text's n-grams (a list for orders 2..N,
        the last repeated).
    sample_text : str, optional
        Text sampled from the teacher (``nplm sample``), whose n-grams are listed too,
        with their own thresholds ``sample_min_count`` (default 1): the unseen n-grams
        a neural teacher finds likely, which the training text cannot list (Deoras et
        al. 2011).
    sample_min_count : int or list of int, optional
        Thresholds for ``sample_text``.
    top_k : int
        Also list each text context's k most probable continuations (contexts seen at
        least ``top_k_min_count`` times; candidates: every word after a one-word
        context, else the words the text shows after the context's last n-2 words, so
        the search stays linear in the listed n-grams).
    top_k_min_count : int
        See ``top_k``.
    lower_teacher : Model or str, optional
        Model giving the probabilities of orders below ``order`` (default: the
        teacher), except for n-grams that start with ``<s>``: their context is a whole
        history, so they keep the teacher's probability.
    prune_to : int, optional
        Relative-entropy pruning to at most this many n-grams of orders >= 2.
    continuation : bool or int
        k > 0: after pruning, replace the probabilities of orders 1..k (below
        ``order``) by the teacher's expected leftover mass of their longer contexts,
        the shape a back-off distribution needs (``nplm.compose.continuation``). 1
        pays on PTB; larger k measured worse.
    threads : int
        Threads for the teacher's scores.
    progress : bool
        Progress bars on stderr.

    Returns
    -------
    NGramTables
        The distilled table.
    """
    if prune_to is not None and (isinstance(prune_to, bool) or int(prune_to) != prune_to or prune_to < 1):
        raise ValueError(f"prune_to is the number of n-grams of orders >= 2 to keep (>= 1), not {prune_to!r}")
    if not 1 <= order <= 16:
        raise ValueError(f"order {order} outside 1..16")
    threads = thread_count(threads)
    if continuation is not False and (int(continuation) != continuation or not 0 <= continuation < order):
        raise ValueError(f"continuation takes the number of orders below order {order} to reshape (0..{order - 1}; "
                         f"0 or False: none), not {continuation!r}")
    if isinstance(top_k, bool) or int(top_k) != top_k or top_k < 0:
        raise ValueError(f"top_k takes the number of continuations to list per context (>= 0), not {top_k!r}")
    # (the arguments first: loading a teacher can take seconds)
    teacher = _load(teacher)
    lower = _load(lower_teacher) if lower_teacher is not None else teacher
    _warn_short_histories(teacher, order, lower is not teacher)
    words = teacher.vocab.words()
    V = len(words)
    wid = {w: i for i, w in enumerate(words)}
    for sp in ("<s>", "</s>"):
        if sp not in wid:
            raise ValueError(f"the teacher's vocabulary has no {sp}")
    bos, eos = wid["<s>"], wid["</s>"]
    null = wid.get("<null>")
    lower_map = _vocab_map(words, lower) if lower is not teacher else None
    thresholds = _per_order(min_count, order, "min_count")
    sample_thresholds = _per_order(sample_min_count, order, "sample_min_count")
    rows = {n: [] for n in range(2, order + 1)}
    counted = None
    forbidden = {"<s>", "</s>", "<null>"}
    if text is not None:
        counted = count_text(text, teacher.vocab, order, V, bos, eos, forbidden, progress)
        for n in range(2, order + 1):
            r, c = counted[n]
            rows[n].append(r[c >= thresholds[n]])
    if sample_text is not None:
        # only the rows that pass are built: most sampled n-grams are seen once
        sampled = count_text(sample_text, teacher.vocab, order, V, bos, eos, forbidden, progress,
                             min_counts=sample_thresholds)
        for n in range(2, order + 1):
            rows[n].append(sampled[n][0])
        del sampled
    if ngrams is not None:
        tables = read_arpa(ngrams) if not isinstance(ngrams, NGramTables) else ngrams
        m = np.array([wid.get(w, 0) for w in tables.vocab], dtype=np.int32)
        for n in range(2, min(order, tables.order) + 1):
            rows[n].append(m[tables.ids[n - 1]])
    if text is None and ngrams is None and sample_text is None:
        raise ValueError("give a text or a back-off model whose n-grams to list")
    if top_k:
        if counted is None:
            raise ValueError("top_k needs a text (its contexts get the extra continuations)")
        cand = np.flatnonzero(~np.isin(np.arange(V), [bos] + ([null] if null is not None else [])))
        words_seen = np.bincount(counted[2][0][:, 0], weights=counted[2][1], minlength=V)
        it = range(2, order + 1)
        if progress:
            it = tqdm(it, desc=f"top-{top_k} continuations", unit="order")
        for n in it:
            if n == 2:
                ctx = np.flatnonzero(words_seen >= top_k_min_count).astype(np.int32)[:, None]
                ctx = ctx[(ctx[:, 0] != eos) & (ctx[:, 0] != (null if null is not None else -1))]
                lower_rows = None
            else:
                r, c = counted[n - 1]
                ctx = r[(c >= top_k_min_count) & (r[:, -1] != eos)]
                lower_rows = counted[n - 1][0]
            rows[n].append(_top_continuations(teacher, ctx, lower_rows, cand.astype(np.int32), top_k, threads))
    if order >= 2 and not any(((r[:, 0] != bos) | (r[:, 1] != eos)).any() for r in rows[2]):
        # every listed n-gram has its bigram suffix listed, so this means a unigram
        # table (and an empty line's <s> </s>): the sources list nothing
        raise ValueError("no n-grams of order 2 or more to list: the text has no words, or every count "
                         "is below the min count, and no n-gram model gives any")
    s = build_structure(V, {n: np.concatenate(rows[n]) if rows[n] else np.zeros((0, n), np.int32)
                            for n in range(2, order + 1)})
    def score(r):
        """Teacher log10 p(last | rest) of rows of r.shape[1] words: the lower
        teacher below the top order, except for n-grams that start at <s> (their
        context is a whole history, so the teacher knows best)."""
        if r.shape[1] == order or lower is teacher:
            return _score(teacher, r, threads).astype(np.float64)
        out = _score(lower, r, threads, lower_map).astype(np.float64)
        start = r[:, 0] == bos
        if r.shape[1] > 1 and start.any():
            out[start] = _score(teacher, np.ascontiguousarray(r[start]), threads)
        return out

    it = range(1, s.order + 1)
    if progress:
        it = tqdm(it, desc="teacher scores", unit="order")
    logprob = {n: score(s.rows(n)) for n in it}
    predictable = np.ones(V, dtype=bool)
    predictable[bos] = False
    if null is not None:
        predictable[null] = False
    bos_lp = float(np.clip(logprob[1][bos], -99.0, 0.0))
    bows, p = compute_backoffs(s, logprob, predictable)
    if prune_to is not None:
        s, logprob = prune_structure(s, logprob, p, int(prune_to), bos, eos)
        bows, p = compute_backoffs(s, logprob, predictable)
    if continuation and s.order > 1:
        # reshape the lower orders of the final table for backing off (nplm/continuation.py)
        top = min(int(continuation), s.order - 1)
        shaped = {1: cont.unigrams(score, s, logprob, bos, eos, predictable, progress)}
        for n in range(2, top + 1):
            shaped[n] = cont.level(score, s, logprob, n, bos, eos, progress=progress)
        logprob.update(shaped)
        bows, p = compute_backoffs(s, logprob, predictable)
    logprob[1][bos] = bos_lp
    return _to_tables(s, words, logprob, bows, null)


def _to_tables(s, words, logprob, bows, null):
    V = len(words)
    if null is None:
        remap = np.arange(V, dtype=np.int32)
        vocab = list(words)
        keep1 = np.ones(V, dtype=bool)
    else:
        keep1 = np.ones(V, dtype=bool)
        keep1[null] = False
        remap = np.cumsum(keep1, dtype=np.int32) - 1
        vocab = [w for i, w in enumerate(words) if i != null]
    ids, lps, bos_ = [], [], []
    for n in range(1, s.order + 1):
        r = s.rows(n)
        if n == 1:
            r = r[keep1]
            lp, bo = logprob[1][keep1], bows[1][keep1]
        else:
            lp, bo = logprob[n], bows[n]
        ids.append(np.ascontiguousarray(remap[r], dtype=np.int32))
        lps.append(np.asarray(lp, dtype=np.float32))
        bos_.append(np.asarray(bo, dtype=np.float32) if n < s.order else np.zeros(len(lp), np.float32))
    return NGramTables(vocab=vocab, ids=ids, logprob=lps, backoff=bos_,
                       comments=["distilled by nplm"])


def distil_to_file(teacher, out, order, text=None, **kwargs):
    """distil() and write the result: ARPA (by default; .gz/.bz2/.xz compressed by
    extension) or, for a path ending in .nplm/.bin, an nplm back-off binary.
    Refuses to overwrite the teacher or the text."""
    for src in (teacher, text, kwargs.get("ngrams"), kwargs.get("lower_teacher"), kwargs.get("sample_text")):
        if isinstance(src, (str, bytes)) or hasattr(src, "__fspath__"):
            if same_file(src, out):
                raise ValueError(f"refusing to overwrite the input {src!r}")
    tables = distil(teacher, order, text, **kwargs)
    write_tables(tables, out, progress=kwargs.get("progress", False))
    return tables


def write_tables(tables, out, progress=False):
    if os.fspath(out).endswith((".nplm", ".bin", ".binary")):
        build_binary(tables, out)
    else:
        write_arpa(tables, out, progress=progress)
