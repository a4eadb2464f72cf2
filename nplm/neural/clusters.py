"""Word classes and trees for factored output layers.

* :func:`frequency_bins` — Mikolov-style classes cut from the frequency-sorted vocabulary.
* :func:`brown_clusters` — classes that maximise the class-bigram likelihood (Brown et
  al. 1992), found with the exchange algorithm (Kneser & Ney 1993; Martin et al. 1998).
* :class:`ClassLayout` — the arrays a class-factored softmax needs.
* :func:`huffman_tree` / :class:`HuffmanTree` — the word2vec-style binary tree for a
  tree-factored (hierarchical) softmax.

Both layouts convert to and from a ``{name: ndarray}`` dict (``to_arrays`` /
``from_arrays``) for storage in the nplm binary container.
"""
import math

import numpy as np

from nplm.errors import FormatError
from nplm.io.atomic import text_output
from nplm.io.files import open_binary
from nplm.io.progress import tqdm
from nplm.io.text import split_words

try:
    from nplm.neural import _clusters
except ImportError:  # pragma: no cover - only when the extension was never built
    _clusters = None

__all__ = ["frequency_bins", "brown_clusters", "class_bigram_stats", "ClassLayout",
           "HuffmanTree", "huffman_tree", "read_corpus", "write_classes"]


def _kernels():
    if _clusters is None:
        raise ImportError("nplm._clusters is not built; run "
                          "`NPLM_ONLY=_clusters python setup.py build_ext --inplace`")
    return _clusters


# --- validation ---------------------------------------------------------------------


def _as_counts(counts, name="counts"):
    """counts as a 1-D int64 array; ValueError for empty, negative or fractional counts."""
    arr = np.asarray(counts)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one count per word), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: empty vocabulary")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
            bad = int(np.flatnonzero(~np.isfinite(arr) | (arr != np.floor(arr)))[0])
            raise ValueError(f"{name}[{bad}] = {arr[bad]!r} is not a whole number")
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
    if np.any(arr < 0):
        bad = int(np.flatnonzero(arr < 0)[0])
        raise ValueError(f"{name}[{bad}] = {arr[bad]} is negative")
    return arr.astype(np.int64)


def _check_n_classes(n_classes, vocab_size):
    if isinstance(n_classes, bool) or not isinstance(n_classes, (int, np.integer)):
        raise ValueError(f"n_classes must be an integer, got {n_classes!r}")
    if not 1 <= n_classes <= vocab_size:
        raise ValueError(f"n_classes = {n_classes} must be between 1 and the vocabulary size "
                         f"({vocab_size}): every class needs at least one word")
    return int(n_classes)


def _as_ids(ids, vocab_size):
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"ids must be a one-dimensional token stream, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"ids must be integers, got dtype {arr.dtype}")
    if arr.size:
        bad = np.flatnonzero((arr < 0) | (arr >= vocab_size))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"ids[{i}] = {arr[i]} is outside the vocabulary 0..{vocab_size - 1}")
    return arr.astype(np.int32)


def _frequency_order(counts, rng=None):
    """Word ids by descending count; ties by ascending id, or shuffled by ``rng``."""
    if rng is None:
        return np.argsort(-counts, kind="stable").astype(np.int32)
    perm = rng.permutation(counts.size)
    return perm[np.argsort(-counts[perm], kind="stable")].astype(np.int32)


# --- frequency binning ----------------------------------------------------------------


def frequency_bins(counts, n_classes, power=0.5):
    """Classes cut from the vocabulary sorted by descending count (ties: lower id first).

    Each class receives about ``1/n_classes`` of the total ``count ** power`` mass.
    The default ``power = 0.5`` (sqrt mass, as in Mikolov's RNNLM toolkit) is used
    because plain unigram mass (``power = 1``) gives the few most frequent words a
    class each and puts most of the vocabulary into the last classes, so the
    within-class softmax of rare words stays large; sqrt mass balances class sizes
    and so the cost of the two softmax layers.  Every class is non-empty (when a
    word's mass would skip a class, the next word takes it), classes are
    contiguous in frequency order, and the result is deterministic.

    Returns int32 ``word_class`` of shape (V,)."""
    counts = _as_counts(counts)
    V = counts.size
    C = _check_n_classes(n_classes, V)
    if not power > 0:
        raise ValueError(f"power must be positive, got {power}")
    order = _frequency_order(counts)
    mass = counts[order].astype(np.float64) ** power
    if mass.sum() <= 0:
        mass = np.ones(V)  # no counts at all: equal shares
    before = np.concatenate(([0.0], np.cumsum(mass)[:-1])) / mass.sum()
    # The class a word "wants": the bin in which its share starts.
    target = np.minimum((before * C).astype(np.int64), C - 1)
    sorted_class = np.empty(V, dtype=np.int64)
    prev = -1
    for i in range(V):
        # never skip a class, and leave at least one word for every remaining class
        prev = min(prev + 1, max(prev, int(target[i]), C - (V - i)))
        sorted_class[i] = prev
    word_class = np.empty(V, dtype=np.int32)
    word_class[order] = sorted_class
    return word_class


# --- Brown clustering by exchange -----------------------------------------------------


class _BigramData:
    """Distinct bigrams of a token stream as CSR successor/predecessor lists."""

    def __init__(self, ids, V):
        left = ids[:-1].astype(np.int64)
        right = ids[1:].astype(np.int64)
        keys, counts = np.unique(left * V + right, return_counts=True)
        first, second = keys // V, keys % V
        counts = counts.astype(np.int64)
        self.n_bigrams = int(counts.sum())
        self.word_nl = np.bincount(first, weights=counts, minlength=V).astype(np.int64)
        self.word_nr = np.bincount(second, weights=counts, minlength=V).astype(np.int64)
        diag = first == second
        self.self_count = np.zeros(V, dtype=np.int64)
        self.self_count[first[diag]] = counts[diag]
        first, second, counts = first[~diag], second[~diag], counts[~diag]
        # keys are sorted by (first, second): already the successor CSR
        self.succ_ptr = np.searchsorted(first, np.arange(V + 1)).astype(np.int64)
        self.succ_word = second.astype(np.int32)
        self.succ_count = counts
        by_right = np.lexsort((first, second))
        self.pred_ptr = np.searchsorted(second[by_right], np.arange(V + 1)).astype(np.int64)
        self.pred_word = first[by_right].astype(np.int32)
        self.pred_count = counts[by_right]


def _class_counts(ids, word_class, C):
    """Class bigram matrix N (C, C) int64 of the token stream."""
    cl = word_class[ids].astype(np.int64)
    return np.bincount(cl[:-1] * C + cl[1:], minlength=C * C).reshape(C, C).astype(np.int64)


def _xlogx(x):
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    pos = x > 0
    out[pos] = x[pos] * np.log(x[pos])
    return out


def class_bigram_stats(ids, word_class, vocab_size=None):
    """Quality of a clustering as a class bigram model of the stream ``ids``.

    Returns a dict: ``loglik`` (natural-log likelihood of ``ids[1:]`` given
    ``ids[:-1]`` under ``p(w|v) = p(c(w)|c(v)) p(w|c(w))``, maximum-likelihood
    estimates), ``perplexity`` (``exp(-loglik / n_bigrams)``), ``mutual_info``
    (average mutual information of adjacent classes, bits) and ``n_bigrams``."""
    word_class = np.asarray(word_class)
    V = word_class.size if vocab_size is None else int(vocab_size)
    if word_class.shape != (V,) or V == 0 or word_class.dtype.kind not in "iu" or word_class.min() < 0:
        raise ValueError(f"word_class must hold a non-negative integer class for each of the "
                         f"{V} words, got {word_class.dtype} {word_class.shape}")
    word_class = word_class.astype(np.int64)
    ids = _as_ids(ids, V)
    if ids.size < 2:
        raise ValueError("need at least two tokens to measure a bigram model")
    C = int(word_class.max()) + 1
    N = _class_counts(ids, word_class, C)
    total = float(N.sum())
    nl, nr = N.sum(axis=1), N.sum(axis=0)
    word_nr = np.bincount(ids[1:], minlength=V)
    # sum_{c,d} N[c,d] log(N[c,d] / NL[c])  +  sum_w n(w) log(n(w) / NR[c(w)])
    loglik = _loglik(N, nl, nr, word_nr)
    mi = (_xlogx(N).sum() - _xlogx(nl).sum() - _xlogx(nr).sum() + _xlogx(total)) / total
    return {"loglik": float(loglik), "perplexity": math.exp(-loglik / total),
            "mutual_info": float(mi / math.log(2)), "n_bigrams": int(total)}


def brown_clusters(ids, vocab_size, n_classes, seed=0, iterations=20, progress=False,
                   init="roundrobin", tol=1e-4, callback=None):
    """Cluster words by maximising the class-bigram likelihood (exchange algorithm).

    ids: int token stream of the training corpus (sentence boundaries already
    encoded as word ids, e.g. ``</s>`` between sentences); vocab_size: V;
    n_classes: C (1..V).

    Starting from a frequency-based assignment, each pass visits the words in
    descending frequency and moves each one to the class that maximises the class
    bigram log-likelihood (or leaves it where it is); passes repeat until no word
    moves, ``iterations`` passes are done, or one pass improves the per-bigram
    log-likelihood by less than ``tol`` nats.  The likelihood rises with every move,
    no class is ever emptied, and words that never occur keep their initial class.

    init: ``"roundrobin"`` (words in frequency order dealt to classes in turn: every
    class starts with frequent and rare words alike), ``"bins"``
    (:func:`frequency_bins`), or an int array of shape (V,) with every class used.
    seed: breaks ties between equally frequent words (initial assignment and visiting
    order): 0 by word id, otherwise by a seeded shuffle; the result is deterministic
    for a given seed.
    callback(pass_index, moves, loglik) is called after each pass with the exact
    log-likelihood of :func:`class_bigram_stats`.

    Returns int32 ``word_class`` of shape (V,)."""
    k = _kernels()
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise ValueError(f"vocab_size must be a positive integer (empty vocabulary?), got {vocab_size!r}")
    V = int(vocab_size)
    C = _check_n_classes(n_classes, V)
    ids = _as_ids(ids, V)
    if int(iterations) < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    counts = np.bincount(ids, minlength=V).astype(np.int64)
    rng = np.random.default_rng(seed) if seed else None
    order = _frequency_order(counts, rng)
    word_class = _initial_classes(init, counts, order, V, C)
    if ids.size < 2 or C == 1 or iterations == 0:
        return word_class

    data = _BigramData(ids, V)
    N = _class_counts(ids, word_class, C)
    NT = np.ascontiguousarray(N.T)
    NL, NR = N.sum(axis=1), N.sum(axis=0)
    class_size = np.bincount(word_class, minlength=C).astype(np.int64)
    # x log x for every count the matrix can hold, capped at 2^24 entries (128 MiB)
    F = k.xlogx_table(min(data.n_bigrams + 1, 1 << 24))
    active = order[(data.word_nl[order] + data.word_nr[order]) > 0]
    per_token = data.n_bigrams
    ll = _loglik(N, NL, NR, data.word_nr)

    bar = None
    if progress:
        bar = tqdm(total=int(iterations), desc=f"exchange C={C}", unit="pass")
    try:
        for it in range(int(iterations)):
            moves = k.exchange_pass(data.succ_ptr, data.succ_word, data.succ_count,
                                    data.pred_ptr, data.pred_word, data.pred_count,
                                    data.self_count, data.word_nl, data.word_nr,
                                    active, F, word_class, class_size, N, NT, NL, NR,
                                    1e-7)
            new_ll = _loglik(N, NL, NR, data.word_nr)
            if callback is not None:
                callback(it, int(moves), new_ll)
            if bar is not None:
                bar.set_postfix(moves=int(moves), ppl=f"{math.exp(-new_ll / per_token):.2f}",
                                refresh=False)
                bar.update(1)
            gain = (new_ll - ll) / per_token
            ll = new_ll
            if moves == 0 or gain < tol:
                break
    finally:
        if bar is not None:
            bar.close()
    return word_class


def _loglik(N, NL, NR, word_nr):
    return float(_xlogx(N).sum() - _xlogx(NL).sum() - _xlogx(NR).sum() + _xlogx(word_nr).sum())


def _initial_classes(init, counts, order, V, C):
    if isinstance(init, str):
        if init == "roundrobin":
            word_class = np.empty(V, dtype=np.int32)
            word_class[order] = np.arange(V, dtype=np.int32) % C
            return word_class
        if init == "bins":
            return frequency_bins(counts, C)
        raise ValueError(f"init must be 'roundrobin', 'bins' or an array, got {init!r}")
    word_class = np.asarray(init)
    if word_class.shape != (V,) or word_class.dtype.kind not in "iu":
        raise ValueError(f"init array must be integers of shape ({V},), got {word_class.dtype} {word_class.shape}")
    if word_class.min() < 0 or word_class.max() >= C:
        raise ValueError(f"init classes must lie in 0..{C - 1}")
    missing = np.flatnonzero(np.bincount(word_class, minlength=C) == 0)
    if missing.size:
        raise ValueError(f"init leaves class {int(missing[0])} empty")
    return word_class.astype(np.int32).copy()


# --- class layout -----------------------------------------------------------------------


def _int_vector(arrays, name, length=None):
    try:
        arr = np.asarray(arrays[name])
    except KeyError:
        raise ValueError(f"missing array {name!r}") from None
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or (length is not None and arr.size != length):
        want = f"({length},)" if length is not None else "1-D"
        raise ValueError(f"array {name!r} must be integer with shape {want}, got {arr.dtype} {arr.shape}")
    return arr.astype(np.int32)


class ClassLayout:
    """Word classes arranged for a class-factored softmax.

    ``word_class`` (V,): class of each word; ``class_start`` (C+1,): class c's words
    are ``class_words[class_start[c]:class_start[c+1]]`` (ascending word id within a
    class); ``word_pos`` (V,): index of each word inside its class.  All int32."""

    _NAMES = ("word_class", "class_start", "class_words", "word_pos")

    def __init__(self, word_class, class_start, class_words, word_pos):
        self.word_class = word_class
        self.class_start = class_start
        self.class_words = class_words
        self.word_pos = word_pos

    @property
    def vocab_size(self):
        return int(self.word_class.size)

    @property
    def n_classes(self):
        return int(self.class_start.size - 1)

    @property
    def class_sizes(self):
        return np.diff(self.class_start)

    @classmethod
    def from_assignment(cls, word_class, n_classes=None):
        """Build the layout from a class per word; classes must be 0..C-1, all used
        (C = ``n_classes`` or max + 1)."""
        wc = np.asarray(word_class)
        if wc.ndim != 1 or wc.size == 0:
            raise ValueError(f"word_class must be a non-empty 1-D array, got shape {wc.shape}")
        if wc.dtype.kind not in "iu":
            raise ValueError(f"word_class must be integers, got dtype {wc.dtype}")
        if wc.min() < 0:
            bad = int(np.flatnonzero(wc < 0)[0])
            raise ValueError(f"word_class[{bad}] = {wc[bad]} is negative")
        C = int(wc.max()) + 1 if n_classes is None else _check_n_classes(n_classes, wc.size)
        if wc.max() >= C:
            bad = int(np.flatnonzero(wc >= C)[0])
            raise ValueError(f"word_class[{bad}] = {wc[bad]} is not below n_classes = {C}")
        sizes = np.bincount(wc, minlength=C)
        if np.any(sizes == 0):
            raise ValueError(f"class {int(np.flatnonzero(sizes == 0)[0])} has no words "
                             f"(classes must be numbered 0..{C - 1} without gaps)")
        wc = wc.astype(np.int32)
        class_words = np.argsort(wc, kind="stable").astype(np.int32)
        class_start = np.zeros(C + 1, dtype=np.int32)
        np.cumsum(sizes, out=class_start[1:])
        word_pos = np.empty(wc.size, dtype=np.int32)
        word_pos[class_words] = np.arange(wc.size, dtype=np.int32) - class_start[wc[class_words]]
        return cls(wc, class_start, class_words, word_pos)

    def to_arrays(self):
        """``{name: int32 array}`` for the binary container."""
        return {name: getattr(self, name) for name in self._NAMES}

    @classmethod
    def from_arrays(cls, arrays):
        """Rebuild from :meth:`to_arrays` output (e.g. container views, not copied
        beyond an int32 cast); ValueError when the arrays are inconsistent."""
        wc = _int_vector(arrays, "word_class")
        V = wc.size
        start = _int_vector(arrays, "class_start")
        words = _int_vector(arrays, "class_words", V)
        pos = _int_vector(arrays, "word_pos", V)
        C = start.size - 1
        if V == 0 or C < 1 or start[0] != 0 or start[-1] != V or np.any(np.diff(start) <= 0):
            raise ValueError("class_start must rise strictly from 0 to the vocabulary size "
                             "(every class non-empty)")
        if np.any(np.sort(words) != np.arange(V)):
            raise ValueError("class_words is not a permutation of the vocabulary")
        owner = np.repeat(np.arange(C, dtype=np.int32), np.diff(start))
        if np.any(wc[words] != owner):
            raise ValueError("class_words disagrees with word_class")
        if np.any(pos[words] != np.arange(V) - start[owner]):
            raise ValueError("word_pos disagrees with class_words")
        return cls(wc, start, words, pos)

    def __repr__(self):
        return f"ClassLayout(vocab_size={self.vocab_size}, n_classes={self.n_classes})"


# --- Huffman tree ---------------------------------------------------------------------


class HuffmanTree:
    """Binary Huffman tree over the vocabulary, word2vec style.

    Inner nodes are numbered 0..V-2 in order of creation, so the root is V-2.
    For word w, ``points[w, :lengths[w]]`` are the inner nodes on its path, root
    first, and ``codes[w, j]`` is the branch (0/1) taken at ``points[w, j]``.
    Entries past ``lengths[w]`` are padding (points -1, codes 0).  With word2vec's
    convention a tree softmax gives ``P(code 0 at node n) = sigmoid(h . u_n)``."""

    _NAMES = ("points", "codes", "lengths")

    def __init__(self, points, codes, lengths):
        self.points = points
        self.codes = codes
        self.lengths = lengths

    @property
    def vocab_size(self):
        return int(self.lengths.size)

    @property
    def max_length(self):
        return int(self.points.shape[1])

    def to_arrays(self):
        """``{"points": int32, "codes": int8, "lengths": int32}`` for the container."""
        return {name: getattr(self, name) for name in self._NAMES}

    @classmethod
    def from_arrays(cls, arrays):
        """Rebuild from :meth:`to_arrays` output; ValueError when inconsistent."""
        lengths = _int_vector(arrays, "lengths")
        V = lengths.size
        try:
            points = np.asarray(arrays["points"])
            codes = np.asarray(arrays["codes"])
        except KeyError as e:
            raise ValueError(f"missing array {e.args[0]!r}") from None
        if V == 0 or points.ndim != 2 or points.shape[0] != V or codes.shape != points.shape \
                or points.dtype.kind not in "iu" or codes.dtype.kind not in "iu":
            raise ValueError(f"points/codes must be integer arrays of shape ({V}, max_len), got "
                             f"{points.dtype} {points.shape} and {codes.dtype} {codes.shape}")
        L = points.shape[1]
        if np.any(lengths < 0) or np.any(lengths > L) or (V > 1 and np.any(lengths == 0)):
            raise ValueError(f"lengths must lie in 1..{L}")
        inside = np.arange(L)[None, :] < lengths[:, None]
        if np.any(points[inside] < 0) or np.any(points[inside] > V - 2) or \
                np.any((codes[inside] != 0) & (codes[inside] != 1)):
            raise ValueError(f"points must lie in 0..{V - 2} and codes in {{0, 1}}")
        if V > 1 and np.any(points[:, 0] != V - 2):
            raise ValueError(f"every path must start at the root (inner node {V - 2})")
        return cls(points.astype(np.int32), codes.astype(np.int8), lengths)

    def __repr__(self):
        return f"HuffmanTree(vocab_size={self.vocab_size}, max_length={self.max_length})"


def huffman_tree(counts):
    """Huffman tree of the word counts (zero counts allowed: they end up deepest).

    Built with the two-queue method: leaves sorted once (O(V log V)), then merged in
    O(V) since inner nodes are created in non-decreasing weight order.  Ties are
    broken deterministically: lower-count-then-lower-id leaves first, and a leaf
    before an inner node of equal weight, which gives the minimum-variance (least
    deep) of the optimal trees.  The first node taken in a merge gets code 0,
    the second code 1.  Python loops over V: ~0.1 s per 100k words."""
    counts = _as_counts(counts)
    V = counts.size
    if V == 1:
        return HuffmanTree(np.zeros((1, 0), np.int32), np.zeros((1, 0), np.int8),
                           np.zeros(1, np.int32))
    leaves = np.argsort(counts, kind="stable").tolist()
    weight = counts.tolist() + [0] * (V - 1)   # node ids: words 0..V-1, inner V..2V-2
    parent = [0] * (2 * V - 1)
    bit = [0] * (2 * V - 1)
    li, qi = 0, V                               # heads of the leaf and inner queues
    for node in range(V, 2 * V - 1):
        for b in (0, 1):
            if li < V and (qi >= node or weight[leaves[li]] <= weight[qi]):
                child = leaves[li]
                li += 1
            else:
                child = qi
                qi += 1
            parent[child] = node
            bit[child] = b
            weight[node] += weight[child]
    # Parents are created after their children, so one backward sweep sets depths.
    depth = [0] * (2 * V - 1)
    for node in range(2 * V - 3, -1, -1):
        depth[node] = depth[parent[node]] + 1
    parent = np.array(parent, dtype=np.int64)
    bit = np.array(bit, dtype=np.int8)
    lengths = np.array(depth[:V], dtype=np.int32)
    L = int(lengths.max())
    points = np.full((V, L), -1, dtype=np.int32)
    codes = np.zeros((V, L), dtype=np.int8)
    # Walk all leaves up together, filling each path from its end.
    rows = np.arange(V)
    node = np.arange(V, dtype=np.int64)
    pos = lengths.astype(np.int64) - 1
    while rows.size:
        points[rows, pos] = parent[node] - V
        codes[rows, pos] = bit[node]
        node = parent[node]
        pos -= 1
        keep = pos >= 0
        rows, node, pos = rows[keep], node[keep], pos[keep]
    return HuffmanTree(points, codes, lengths)


# --- text files -------------------------------------------------------------------------


def read_corpus(path):
    """(words, counts, ids) of a text, one sentence per line, with ``</s>`` after each
    line: words by descending count (ties by first occurrence), ids the int32 stream.
    Raises FormatError naming the line for undecodable text, and for a text without
    words."""
    index, ids = {"</s>": 0}, []
    # decode line by line (not through a text wrapper, which decodes ahead in
    # chunks) so that an encoding error names its own line
    with open_binary(path) as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise FormatError(f"not UTF-8 (byte {e.start}: {e.reason})", path, line_no) from None
            ids.extend(index.setdefault(w, len(index)) for w in split_words(line))
            ids.append(0)
            if len(index) > 1 and ("<s>" in index or "<null>" in index):
                # reserved as in training (vocab.check_corpus): a class for them is meaningless
                bad = "<s>" if "<s>" in index else "<null>"
                raise FormatError(f"reserved token {bad!r} in the text", path, line_no)
    if len(index) == 1:
        raise FormatError("the text has no words", path)
    ids = np.array(ids, dtype=np.int32)
    counts = np.bincount(ids, minlength=len(index))
    # renumber by descending count, ties by first occurrence (= old id)
    order = np.argsort(-counts, kind="stable")
    new_id = np.empty_like(order)
    new_id[order] = np.arange(order.size)
    words = list(index)
    return [words[i] for i in order], counts[order].astype(np.int64), new_id[ids].astype(np.int32)


def write_classes(path, words, word_class, counts):
    """``word<TAB>class<TAB>count`` lines (atomically; compressed by the extension;
    '-' is stdout), in the order of ``words``."""
    with text_output(path, text=True) as f:
        for w, c, n in zip(words, np.asarray(word_class).tolist(), np.asarray(counts).tolist()):
            f.write(f"{w}\t{c}\t{n}\n")
