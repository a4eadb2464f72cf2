"""Distillation of any model into a normalised back-off n-gram table (ARPA).

The pipeline, one function per stage, its options in a ``DistilConfig``:

1. ``prepare_teacher``: the teacher (and the lower-order teacher) as a ``Teacher``.
2. ``collect_candidates``: which n-grams are listed.  Every word of the teacher's
   vocabulary as a unigram, plus the n-grams of a text (``count_texts``: counted
   as estimation counts, within ``count_memory``, spilling sorted runs to the
   temporary folder beyond it) each order with its own count threshold, of a
   back-off model,
   of text sampled from the teacher (``nplm sample``, or drawn here by
   ``sample_pool``: the unseen n-grams where a network's generalisation lives), and
   every frequent context's ``top_k`` most probable continuations.  The set is
   closed under prefixes and suffixes (``build_structure``), so every listed
   n-gram's context and lower-order n-gram are listed too (KenLM needs the former;
   exact back-off weights need the latter).
3. ``score_structure``: the probability of a listed n-gram (h, w) is the teacher's
   log10 p(w | h), the context given to the teacher as a state built from h
   (``context_state``, KenLM's GetState), through the LMCore protocol, so back-off,
   neural and interpolated teachers work alike; orders below the top from the lower
   teacher when there is one (``Teacher.score``).
4. ``compute_backoffs`` (nplm/compose/ngram_structure.py): every context's
   distribution sums to one, bow(h) = (1 - sum_listed p(w | h)) / (1 - sum_listed
   p_lower(w | h')), p_lower the *distilled* lower-order probability.
5. ``prune_stage``: relative-entropy pruning (Stolcke 1998) to a target size.
6. ``continuation_stage`` (``continuation=1``): the unigram probabilities replaced by
   the shape backing off needs, fitted to the teacher's leftover mass of the
   one-word contexts with the bows' renormalisation (nplm/compose/continuation.py);
   higher orders can be reshaped too (``continuation=k``), which measured worse on PTB.
7. ``favour_stage`` (``favour_model`` and ``favour_valid``): the teacher moved F of the
   way towards a back-off model, F chosen on a validation text (nplm/compose/favour.py).
8. ``to_tables`` and ``write_tables``.

``distil`` runs the stages with exactly the options given; the defaults that carry
the documented recipe's lessons (lower orders from the back-off component, a sampled
pool within a time/memory budget, bucketed mixture weights, continuation unigrams,
KN's size) are chosen by nplm/compose/distil_auto.py.

Special words: ``<s>`` is never predicted: no n-gram ends with it and its unigram
log10 probability is copied from the teacher (lmplz writes 0), clipped to [-99, 0];
every other context's distribution is over the vocabulary minus ``<s>``.  ``<unk>``
is an ordinary word (the teacher's probability of an unknown word); text words the
teacher does not know become ``<unk>``.  The neural padding token ``<null>`` is not
a word of the distilled model.  The unigram distribution is renormalised over the
vocabulary minus ``<s>`` (a no-op for a normalised teacher).

Memory: counting holds at most ``count_memory`` (``-S``; the counts of the distinct
n-grams of a sampled pool are most of a big run's memory, and most are thresholded
away), the later stages the listed n-grams as flat numpy arrays; no Python object
per n-gram.  Temporary files (the spilled runs, the pool drawn here) go to
``temp_prefix`` (``-T``) and vanish however the run ends.
"""
import contextlib
import dataclasses
import functools
import math
import os
import resource
import time
import warnings

import numpy as np

from nplm._kernels import thread_count
from nplm.backoff.arpa import read_arpa, write_arpa
from nplm.backoff.binary import build_binary
from nplm.backoff.estimate.config import DEFAULT_MEMORY, parse_size, temp_directory
from nplm.backoff.estimate.every_order import count_every_order
from nplm.backoff.kenlm import write as kenlm_write
from nplm.backoff.tables import NGramTables, expand_ranges, row_groups
from nplm.compose import continuation as cont
from nplm.compose._distil import probe_groups  # noqa: F401 (probe_groups: for nplm.convert)
from nplm.compose.favour import GRID, choose_favour
from nplm.compose.ngram_structure import (  # noqa: F401
    EPS,
    MIN_DEN,
    Structure,
    build_structure,
    compute_backoffs,
    keep_masks,
    prune_scores,
    prune_structure,
    unique_sorted,
)
from nplm.io.atomic import same_file, temp_folder
from nplm.io.progress import tqdm
from nplm.io.text import utf8_lines
from nplm.model import Model, quiet_config
from nplm.neural.query import exact_network_of, network_of
from nplm.neural.sample import sample_to_file
from nplm.neural.vocab import NULL

try:
    from nplm.compose import _distil
except ImportError as e:  # pragma: no cover - build problem
    raise ImportError("nplm._distil is not built; run `python setup.py build_ext --inplace` "
                      f"in the source tree ({e})") from None

# (the names the tests and tools have always used)
_prune_scores = prune_scores
_keep_masks = keep_masks
_unique = unique_sorted
_FORBIDDEN = frozenset({"<s>", "</s>", "<null>"})
POOL_PIECES = 16          # a pool drawn against a time budget: in this many pieces at most


@dataclasses.dataclass
class DistilConfig:
    """Every option of the pipeline (``distil``'s docstring says what each does).

    ``sample_tokens`` > 0 draws that many tokens from ``sample_models`` (neural model
    paths; split 2:1:1... between them, the recipe's 80M + 40M) into temporary
    files, counted with ``sample_text`` under ``sample_min_count``.  With
    ``sample_more`` (a callable) the pool is drawn in pieces of ``POOL_PIECES``-th
    of it, and stops early when ``sample_more(tokens drawn, seconds spent drawing,
    tokens of the next piece)`` is false (a time budget measured as it goes).
    ``continuation_contexts``: the one-word contexts whose whole teacher
    distribution the continuation unigrams score (the most probable; default all)."""
    order: int
    text: object = None
    ngrams: object = None
    min_count: object = None
    sample_text: object = None
    sample_min_count: object = None
    top_k: int = 0
    top_k_min_count: int = 2
    lower_teacher: object = None
    prune_to: object = None
    prune_threshold: object = None
    continuation: object = False
    threads: int = 1
    progress: bool = False
    sample_tokens: int = 0
    sample_models: tuple = ()
    sample_seed: int = 1
    favour_model: object = None
    favour_valid: object = None
    favour_grid: tuple = GRID
    count_memory: object = None
    temp_prefix: object = None
    continuation_contexts: object = None
    sample_more: object = None

    def check(self):
        """Refuse out-of-range options before the teacher is loaded (seconds)."""
        p = self.prune_to
        if p is not None and (isinstance(p, bool) or int(p) != p or p < 1):
            raise ValueError(f"prune_to is the number of n-grams of orders >= 2 to keep (>= 1), not {p!r}")
        th = self.prune_threshold
        if th is not None and p is not None:
            raise ValueError("give prune_to or prune_threshold, not both")
        if th is not None and (isinstance(th, bool) or not 0 <= th < math.inf):
            raise ValueError(f"prune_threshold is a relative perplexity increase (>= 0), not {th!r}")
        if not 1 <= self.order <= 16:
            raise ValueError(f"order {self.order} outside 1..16")
        c = self.continuation
        if c is not False and (int(c) != c or not 0 <= c < self.order):
            raise ValueError(f"continuation takes the number of orders below order {self.order} to reshape "
                             f"(0..{self.order - 1}; 0 or False: none), not {c!r}")
        c = self.continuation_contexts
        if c is not None and (isinstance(c, bool) or int(c) != c or c < 1):
            raise ValueError(f"continuation_contexts takes a number of contexts (>= 1) or None, not {c!r}")
        k = self.top_k
        if isinstance(k, bool) or int(k) != k or k < 0:
            raise ValueError(f"top_k takes the number of continuations to list per context (>= 0), not {k!r}")
        self.threads = thread_count(self.threads)    # an integer from 1, capped at the CPUs
        t = self.sample_tokens
        if isinstance(t, bool) or int(t) != t or t < 0:
            raise ValueError(f"sample_tokens takes a number of tokens to sample (>= 0), not {t!r}")
        if t and not self.sample_models:
            raise ValueError("sample_tokens needs sample_models: the neural models to sample from")
        self._count_budget()
        temp_directory(self.temp_prefix)
        if (self.favour_model is None) != (self.favour_valid is None):
            raise ValueError("favour_model and favour_valid go together: the back-off model to lean on "
                             "and the validation text that chooses how far")

    def _count_budget(self):
        return parse_size(DEFAULT_MEMORY if self.count_memory is None else self.count_memory)

    def counting(self):
        """count_texts's options: the budget (``count_memory`` less what the process
        holds already, as estimation's -S), the temporary folder, progress."""
        memory = self._count_budget()
        held = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return dict(memory=max(memory - held, 1 << 16), temp_prefix=self.temp_prefix, progress=self.progress)

    def inputs(self):
        """The input paths (none may be overwritten by the output)."""
        return [self.text, self.ngrams, self.lower_teacher, self.sample_text, self.favour_model,
                self.favour_valid, *self.sample_models]


# ---------------------------------------------------------------------------------
# Stage 1: the teacher.

def load_model(model):
    """An nplm.Model of a path (quietly), or the model given."""
    if isinstance(model, (str, bytes)) or hasattr(model, "__fspath__"):
        return Model(model, quiet_config())
    return model


@dataclasses.dataclass
class Teacher:
    """The loaded teacher, its vocabulary and the lower-order teacher (``lower`` is
    ``model`` when there is none; ``lower_map``: teacher id -> lower's id)."""
    model: object
    lower: object
    lower_map: object
    words: list
    bos: int
    eos: int
    null: object
    order: int
    threads: int

    @property
    def V(self):
        return len(self.words)

    def predictable(self):
        """The words a context can predict: all but <s> and <null>."""
        mask = np.ones(self.V, dtype=bool)
        mask[self.bos] = False
        if self.null is not None:
            mask[self.null] = False
        return mask

    def score(self, r):
        """Teacher log10 p(last | rest) of rows of r.shape[1] words (float64): the
        lower teacher below the top order, except for n-grams that start at <s>
        (their context is a whole history, so the teacher knows best)."""
        if r.shape[1] == self.order or self.lower is self.model:
            return _score(self.model, r, self.threads).astype(np.float64)
        out = _score(self.lower, r, self.threads, self.lower_map).astype(np.float64)
        start = r[:, 0] == self.bos
        if r.shape[1] > 1 and start.any():
            out[start] = _score(self.model, np.ascontiguousarray(r[start]), self.threads)
        return out


def prepare_teacher(teacher, cfg):
    """Stage 1: load the teacher and the lower-order teacher, check the vocabulary."""
    model = load_model(teacher)
    lower = load_model(cfg.lower_teacher) if cfg.lower_teacher is not None else model
    _warn_short_histories(model, cfg.order, lower is not model)
    words = model.vocab.words()
    wid = {w: i for i, w in enumerate(words)}
    for sp in ("<s>", "</s>"):
        if sp not in wid:
            raise ValueError(f"the teacher's vocabulary has no {sp}")
    lower_map = vocab_map(words, lower) if lower is not model else None
    return Teacher(model, lower, lower_map, words, wid["<s>"], wid["</s>"], wid.get("<null>"),
                   cfg.order, cfg.threads)


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


def teacher_log10(model, rows, threads=1):
    """log10 p(last | rest) of rows of ``model``'s word ids (float32), as the
    teacher is scored."""
    return _score(model, rows, threads)


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
                  f"are poor, and {need}", stacklevel=5)


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


def vocab_map(words, model):
    """Ids in ``model`` of ``words``; raises when a word other than <null> is unknown
    to it (the two models would disagree about what <unk> covers)."""
    ids = model.vocab.ids(words).astype(np.int32)
    missing = [w for w, i in zip(words, ids) if i == 0 and w not in ("<unk>", "<null>")]
    if missing:
        raise ValueError(f"the lower-order teacher lacks {len(missing)} words of the teacher's vocabulary "
                         f"(first: {missing[0]!r}); both must share one vocabulary")
    return ids


# ---------------------------------------------------------------------------------
# Stage 2: the candidate n-grams.

def count_texts(paths, words, order, min_counts=None, memory=DEFAULT_MEMORY, temp_prefix=None, progress=False):
    """{n: (rows (count, n) int32, counts int64)} for n = 2..order: the n-grams of the
    texts (counted together) with one <s> before and </s> after each line (never
    ending in <s>), in teacher ids (``words``: the teacher's words by id; others
    count as <unk>); with ``min_counts`` ({n: c}) only those seen at least c times.
    Counted as estimation counts, within ``memory`` (``-S``), spilling sorted runs
    to ``temp_prefix`` (``-T``) beyond it (nplm/backoff/estimate/every_order.py)."""
    return count_every_order([os.fspath(p) for p in paths], order, words, min_counts, memory, temp_prefix,
                             sorted(_FORBIDDEN), progress)


def count_text(path, words, order, min_counts=None, **kwargs):
    """``count_texts`` of one text."""
    return count_texts([path], words, order, min_counts, **kwargs)


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


def sample_shares(tokens, n_models):
    """Tokens to draw from each of ``n_models`` networks: the first gets twice the
    others' share (the recipe's 80M + 40M from two networks)."""
    weights = np.array([2.0] + [1.0] * (n_models - 1))
    shares = np.floor(tokens * weights / weights.sum()).astype(np.int64)
    shares[0] += tokens - shares.sum()
    return [int(s) for s in shares]


def sample_pool(cfg, workdir):
    """Draw ``cfg.sample_tokens`` tokens from ``cfg.sample_models`` into text files
    under ``workdir`` (in pieces while ``cfg.sample_more`` allows, when given); their
    paths."""
    if cfg.sample_more is not None:
        return sample_pieces(cfg, workdir)
    paths = []
    for k, (model, tokens) in enumerate(zip(cfg.sample_models, sample_shares(cfg.sample_tokens,
                                                                              len(cfg.sample_models)))):
        if tokens <= 0:
            continue
        out = os.path.join(workdir, f"sample{k}.txt")
        sample_to_file(model, out, tokens, seed=cfg.sample_seed + k, progress=cfg.progress)
        paths.append(out)
    return paths


def sample_pieces(cfg, workdir):
    """The pool in pieces, each from the network furthest below its share, while
    ``cfg.sample_more(drawn, seconds, next piece)`` says go on; the paths."""
    shares = np.array(sample_shares(cfg.sample_tokens, len(cfg.sample_models)), dtype=np.float64)
    piece = max(1, -(-cfg.sample_tokens // POOL_PIECES))
    drawn = np.zeros(len(shares), dtype=np.int64)
    paths, seconds = [], 0.0
    while drawn.sum() < cfg.sample_tokens:
        k = int(np.argmin(drawn / np.maximum(shares, 1)))
        tokens = int(min(piece, cfg.sample_tokens - drawn.sum()))
        if not cfg.sample_more(int(drawn.sum()), seconds, tokens):
            break
        out = os.path.join(workdir, f"sample{len(paths)}.txt")
        t0 = time.perf_counter()
        _, got = sample_to_file(cfg.sample_models[k], out, tokens, seed=cfg.sample_seed + len(paths),
                                progress=cfg.progress)
        seconds += time.perf_counter() - t0
        drawn[k] += got
        paths.append(out)
    return paths


def sampled_rows(t, cfg):
    """{n: rows} of the sampled n-grams that pass ``sample_min_count``: from
    ``sample_text`` and from ``sample_tokens`` drawn now into the temporary folder
    (counted together)."""
    thresholds = _per_order(cfg.sample_min_count, cfg.order, "sample_min_count")
    paths = [cfg.sample_text] if cfg.sample_text is not None else []
    with contextlib.ExitStack() as stack:
        if cfg.sample_tokens:
            folder = stack.enter_context(temp_folder(temp_directory(cfg.temp_prefix), "nplm-distil-"))
            paths += sample_pool(cfg, folder.path)
        if not paths:
            return {}
        # only the rows that pass are built: most sampled n-grams are seen once
        counted = count_texts(paths, t.words, cfg.order, thresholds, **cfg.counting())
    return {n: counted[n][0] for n in counted}


def model_rows(t, ngrams, order):
    """{n: rows} of a back-off model's n-grams (NGramTables or ARPA path), in teacher ids."""
    tables = read_arpa(ngrams) if not isinstance(ngrams, NGramTables) else ngrams
    wid = {w: i for i, w in enumerate(t.words)}
    m = np.array([wid.get(w, 0) for w in tables.vocab], dtype=np.int32)
    return {n: m[tables.ids[n - 1]] for n in range(2, min(order, tables.order) + 1)}


def _ngram_sources(ngrams):
    """``ngrams`` as a list of back-off models (one, several, or none)."""
    if ngrams is None:
        return []
    return list(ngrams) if isinstance(ngrams, (list, tuple)) else [ngrams]


def collect_candidates(t, cfg):
    """Stage 2: {n: rows} of every listed n-gram of orders 2..order (duplicates allowed)."""
    rows = {n: [] for n in range(2, cfg.order + 1)}
    thresholds = _per_order(cfg.min_count, cfg.order, "min_count")
    _per_order(cfg.sample_min_count, cfg.order, "sample_min_count")
    counted = None
    if cfg.text is not None:
        # (top_k needs every count; otherwise only the rows that pass are built)
        counted = count_text(cfg.text, t.words, cfg.order, None if cfg.top_k else thresholds, **cfg.counting())
        for n in range(2, cfg.order + 1):
            r, c = counted[n]
            rows[n].append(r[c >= thresholds[n]])
    for n, r in sampled_rows(t, cfg).items():
        rows[n].append(r)
    for source in _ngram_sources(cfg.ngrams):
        for n, r in model_rows(t, source, cfg.order).items():
            rows[n].append(r)
    if cfg.text is None and cfg.ngrams is None and cfg.sample_text is None and not cfg.sample_tokens:
        raise ValueError("give a text or a back-off model whose n-grams to list")
    if cfg.top_k:
        if counted is None:
            raise ValueError("top_k needs a text (its contexts get the extra continuations)")
        for n, r in top_k_rows(t, counted, cfg).items():
            rows[n].append(r)
    _check_listed(rows, t.bos, t.eos, cfg.order)
    return {n: np.concatenate(rows[n]) if rows[n] else np.zeros((0, n), np.int32)
            for n in range(2, cfg.order + 1)}


def _check_listed(rows, bos, eos, order):
    if order >= 2 and not any(((r[:, 0] != bos) | (r[:, 1] != eos)).any() for r in rows[2]):
        # every listed n-gram has its bigram suffix listed, so this means a unigram
        # table (and an empty line's <s> </s>): the sources list nothing
        raise ValueError("no n-grams of order 2 or more to list: the text has no words, or every count "
                         "is below the min count, and no n-gram model gives any")


def top_k_rows(t, counted, cfg):
    """{n: rows} of each frequent text context's ``top_k`` most probable continuations."""
    excluded = [t.bos] + ([t.null] if t.null is not None else [])
    cand = np.flatnonzero(~np.isin(np.arange(t.V), excluded)).astype(np.int32)
    words_seen = np.bincount(counted[2][0][:, 0], weights=counted[2][1], minlength=t.V)
    it = range(2, cfg.order + 1)
    if cfg.progress:
        it = tqdm(it, desc=f"top-{cfg.top_k} continuations", unit="order")
    out = {}
    for n in it:
        if n == 2:
            ctx = np.flatnonzero(words_seen >= cfg.top_k_min_count).astype(np.int32)[:, None]
            ctx = ctx[(ctx[:, 0] != t.eos) & (ctx[:, 0] != (t.null if t.null is not None else -1))]
            lower_rows = None
        else:
            r, c = counted[n - 1]
            ctx = r[(c >= cfg.top_k_min_count) & (r[:, -1] != t.eos)]
            lower_rows = counted[n - 1][0]
        out[n] = _top_continuations(t.model, ctx, lower_rows, cand, cfg.top_k, cfg.threads)
    return out


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


def _candidate_groups(ctx, lower_rows):
    """For contexts of m >= 2 words: (order of ``lower_rows`` by group, each context's
    first position in it, its number of candidates), the candidates being the words
    seen after the context's last m-1 words."""
    cg, lg = row_groups(ctx[:, 1:], lower_rows[:, :-1])
    lo_order = np.argsort(lg, kind="stable")
    lg_sorted = lg[lo_order]
    starts = np.searchsorted(lg_sorted, cg, "left")
    return lo_order, starts, np.searchsorted(lg_sorted, cg, "right") - starts


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
        lo_order, starts, per = _candidate_groups(ctx, lower_rows)
    out = []
    for idx, j in expand_ranges(per, chunk):
        words = candidates[j] if m == 1 else lower_rows[lo_order[starts[idx] + j], -1]
        rows = np.column_stack([ctx[idx], words]).astype(np.int32)
        score = _score(model, rows, threads)
        o = np.lexsort((-score, idx))
        idx_s = idx[o]
        rank = np.arange(len(idx_s)) - np.searchsorted(idx_s, idx_s, "left")
        out.append(rows[o][rank < k])
    return np.concatenate(out) if out else np.zeros((0, m + 1), np.int32)


# ---------------------------------------------------------------------------------
# Stages 3-6: scores, back-off weights, pruning, continuation shapes.

def score_structure(t, s, progress=False):
    """Stage 3: {n: teacher log10 p} of every listed n-gram (float64)."""
    it = range(1, s.order + 1)
    if progress:
        it = tqdm(it, desc="teacher scores", unit="order")
    return {n: t.score(s.rows(n)) for n in it}


def prune_stage(t, s, logprob, p, target, threshold=None, info=None):
    """Stage 5: (Structure, logprob, bows) pruned to at most ``target`` n-grams of
    orders >= 2, or of the n-grams whose pruning raises perplexity by less than the
    fraction ``threshold`` (SRILM's -prune); unchanged when both are None.  ``info``
    gets the threshold applied (``prune_threshold``, as a perplexity ratio - 1)."""
    if target is None and threshold is None:
        return s, logprob, None
    nats = None if threshold is None else math.log1p(threshold)
    s, logprob, theta = prune_structure(s, logprob, p, None if target is None else int(target),
                                        t.bos, t.eos, threshold=nats)
    if info is not None:
        info["prune_threshold"] = math.expm1(theta)
    bows, _ = compute_backoffs(s, logprob, t.predictable())
    return s, logprob, bows


def continuation_stage(t, s, logprob, k, progress=False, max_contexts=None):
    """Stage 6: reshape orders 1..k of the final table for backing off
    (nplm/compose/continuation.py); the new bows."""
    top = min(int(k), s.order - 1)
    predictable = t.predictable()
    shaped = {1: cont.unigrams(t.score, s, logprob, t.bos, t.eos, predictable, progress,
                               max_contexts=max_contexts)}
    for n in range(2, top + 1):
        shaped[n] = cont.level(t.score, s, logprob, n, t.bos, t.eos, progress=progress)
    logprob.update(shaped)
    bows, _ = compute_backoffs(s, logprob, predictable)
    return bows


def tables_with_bos(s, words, null, bos, bos_lp, logprob, bows):
    """to_tables with <s>'s unigram set to ``bos_lp`` (``logprob`` is not changed)."""
    lp = dict(logprob)
    lp[1] = logprob[1].copy()
    lp[1][bos] = bos_lp
    return to_tables(s, words, lp, bows, null)


def favour_stage(t, s, logprob, cfg, bos_lp, info):
    """Stage 6b: the teacher moved F of the way towards the back-off model
    ``cfg.favour_model``, F chosen on ``cfg.favour_valid`` (nplm/compose/favour.py);
    (logprob, bows), or None when the back-off model lacks words of the teacher."""
    backoff = load_model(cfg.favour_model)
    try:
        id_map = vocab_map(t.words, backoff)
    except ValueError:
        return None
    shaped = range(1, min(int(cfg.continuation or 0), s.order - 1) + 1)
    backoff_lp = {n: _score(backoff, s.rows(n), cfg.threads, id_map).astype(np.float64)
                  for n in range(1, s.order + 1) if n not in shaped}
    lines = [line.rstrip("\r\n") for line in utf8_lines(cfg.favour_valid)]
    make = functools.partial(tables_with_bos, s, t.words, t.null, t.bos, bos_lp)
    F, logprob, bows, tried = choose_favour(s, logprob, backoff_lp, lines, t.predictable(), make,
                                            cfg.favour_grid)
    info.update(favour=F, favour_tried=tried)
    return logprob, bows


def scored_structure(teacher, cfg):
    """Stages 1-4 for a ``DistilConfig``: (Teacher, Structure, logprob, bows, p)."""
    cfg.check()            # (the options first: loading a teacher can take seconds)
    t = prepare_teacher(teacher, cfg)
    s = build_structure(t.V, collect_candidates(t, cfg))
    logprob = score_structure(t, s, cfg.progress)
    bows, p = compute_backoffs(s, logprob, t.predictable())
    return t, s, logprob, bows, p


def run_pipeline(teacher, cfg, info=None):
    """Run every stage for a ``DistilConfig``; NGramTables.  ``info`` (a dict), if
    given, gets what the stages chose (``favour``, ``favour_tried``, ``prune_threshold``)."""
    t, s, logprob, bows, p = scored_structure(teacher, cfg)
    bos_lp = float(np.clip(logprob[1][t.bos], -99.0, 0.0))
    s, logprob, pruned_bows = prune_stage(t, s, logprob, p, cfg.prune_to, cfg.prune_threshold, info)
    bows = pruned_bows if pruned_bows is not None else bows
    if cfg.continuation and s.order > 1:
        bows = continuation_stage(t, s, logprob, cfg.continuation, cfg.progress, cfg.continuation_contexts)
    if cfg.favour_model is not None:
        logprob, bows = favour_stage(t, s, logprob, cfg, bos_lp, {} if info is None else info) \
            or (logprob, bows)
    logprob[1][t.bos] = bos_lp
    return to_tables(s, t.words, logprob, bows, t.null)


def distil(teacher, order, text=None, **options):
    """Distil ``teacher`` (an nplm.Model or a model path) into NGramTables of ``order``.

    Parameters
    ----------
    teacher : Model or str
        Any model nplm loads: ARPA, back-off or neural binary, interpolation spec.
    order : int
        The order of the table.
    text : str, optional
        Training text whose n-grams are listed (one sentence per line).
    **options
        The fields of ``DistilConfig``:

        - ``ngrams``: a back-off model (NGramTables or ARPA path), or a list of
          them, whose n-grams are listed too;
        - ``min_count``: per-order count thresholds for the text's n-grams (int, or a
          list for orders 2..N, the last repeated);
        - ``sample_text``: text sampled from the teacher (``nplm sample``), whose
          n-grams are listed too, with their own thresholds ``sample_min_count``
          (default 1): the unseen n-grams a neural teacher finds likely (Deoras et al.
          2011);
        - ``sample_tokens``, ``sample_models``, ``sample_seed``: draw that many tokens
          from these neural models now (counted with ``sample_text``);
        - ``top_k``: also list each text context's k most probable continuations
          (contexts seen at least ``top_k_min_count`` times);
        - ``lower_teacher``: the model giving the probabilities of orders below
          ``order`` (default: the teacher), except for n-grams that start with ``<s>``;
        - ``prune_to``: relative-entropy pruning to at most this many n-grams of
          orders >= 2;
        - ``prune_threshold``: instead, prune every n-gram whose removal raises the
          perplexity by less than this fraction (SRILM's ``ngram -prune``);
        - ``continuation``: k > 0: after pruning, replace the probabilities of orders
          1..k by the teacher's expected leftover mass of their longer contexts, the
          shape a back-off distribution needs (``nplm.compose.continuation``).

    Returns
    -------
    NGramTables
        The distilled back-off table.
    """
    return run_pipeline(teacher, DistilConfig(order=order, text=text, **options))


# ---------------------------------------------------------------------------------
# Stage 7: the table and its file.

def to_tables(s, words, logprob, bows, null):
    """NGramTables of a Structure in the teacher's words, <null> left out."""
    V = len(words)
    keep1 = np.ones(V, dtype=bool)
    if null is None:
        remap = np.arange(V, dtype=np.int32)
        vocab = list(words)
    else:
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


def refuse_overwriting_inputs(out, paths):
    """ValueError when ``out`` is one of the input ``paths``."""
    for src in paths:
        if isinstance(src, (str, bytes)) or hasattr(src, "__fspath__"):
            if same_file(src, out):
                raise ValueError(f"refusing to overwrite the input {src!r}")


def distil_to_file(teacher, out, order, text=None, **options):
    """distil() and write the result: ARPA (by default; .gz/.bz2/.xz compressed by
    extension) or, for a path ending in .nplm/.bin, an nplm back-off binary.
    Refuses to overwrite the teacher or the text."""
    cfg = DistilConfig(order=order, text=text, **options)
    refuse_overwriting_inputs(out, [teacher, *cfg.inputs()])
    tables = run_pipeline(teacher, cfg)
    write_tables(tables, out, progress=cfg.progress)
    return tables


def write_tables(tables, out, progress=False, binary=None):
    """Write the table: ``binary`` ({"type": "probing" | "trie" | "nplm", build_binary's
    bit options}) as that binary; else by the name, nplm's binary for .nplm/.bin/.binary
    and ARPA for any other."""
    if binary is not None:
        binary = dict(binary)
        kenlm_write.build_binary(tables, out, binary.pop("type"), **binary)
    elif os.fspath(out).endswith((".nplm", ".bin", ".binary")):
        build_binary(tables, out)
    else:
        write_arpa(tables, out, progress=progress)
