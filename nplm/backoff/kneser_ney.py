"""Interpolated modified Kneser-Ney estimation that reproduces KenLM's ``lmplz``.

``estimate(text, order)`` counts the text, computes adjusted counts, discounts,
interpolated probabilities and back-offs exactly as lmplz does (Heafield et al.
2013; Chen & Goodman 1998, eq. 26) and returns the model as ``NGramTables``,
optionally writing an ARPA file or an nplm binary.  The loops live in ``_kn.pyx``;
this module reads text, validates options and reports progress on stderr.

Differences from lmplz, all deliberate:
  * ``<unk>`` in the text is counted as the unknown word (lmplz refuses it);
    ``skip_symbols=True`` treats ``<s>``, ``</s>`` and ``<unk>`` as whitespace as
    lmplz's ``--skip_symbols`` does.  ``<s>``/``</s>`` in the text are an error.
  * A last line without a newline is a sentence like the others (lmplz drops its
    ``</s>``).
  * Everything happens in memory (proportional to the distinct n-grams), so
    lmplz's ``-S``/``-T`` are accepted by the CLI but have no effect.
  * A unigram pruning threshold other than 0 is refused (lmplz's own source says
    unigrams cannot be pruned; use ``limit_vocab_file``).
"""
import codecs
import gzip
import io
import lzma
import operator
import os
import sys
import time
import warnings
import zlib

import numpy as np
from tqdm import tqdm

from nplm._kernels import QUERY_MAX_ORDER
from nplm.backoff.kenlm.write import build_binary, check_options, resolve_type
from nplm.backoff.tables import NGramTables

try:
    from nplm.backoff import _kn
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError("nplm's Kneser-Ney kernel is not built; run "
                      "`python setup.py build_ext --inplace` (or pip install nplm)") from e
from nplm.backoff.arpa import write_arpa
from nplm.errors import CompressedDataError, FormatError
from nplm.io.atomic import refuse_stdout, same_file
from nplm.io.files import open_binary, open_text
from nplm.io.text import split_words

# The Kneser-Ney kernel counts up to order 32, but a model is only useful if nplm
# can load it: the query kernels' limit.
MAX_ORDER = QUERY_MAX_ORDER
DEFAULT_FALLBACK = (0.5, 1.0, 1.5)
_CHUNK = 1 << 24


class DiscountError(ValueError):
    """The counts-of-counts cannot support modified Kneser-Ney discounts."""


class _Report:
    """lmplz-style stage headers and statistics on stderr, and a progress bar for each
    stage, in the tqdm style of every nplm command, drawn only when stderr is a terminal
    (a pipe or a log gets the headers and statistics alone)."""

    def __init__(self, enabled, stages):
        self.enabled = enabled
        self.stages = stages
        self.bar = None

    def say(self, message):
        if self.enabled:
            print(message, file=sys.stderr, flush=True)

    def notice(self, message):
        """Something the user must hear about even when progress is off."""
        if self.enabled:
            print(message, file=sys.stderr, flush=True)
        else:
            warnings.warn(message, stacklevel=3)

    def stage(self, number, title):
        self.say(f"=== {number}/{self.stages} {title} ===")

    def start(self, total):
        """A bar for ``total`` units of work; none when the total is unknown (0)."""
        self.finish()
        if self.enabled and int(total) > 0:
            self.bar = tqdm(total=int(total), unit="", unit_scale=True, file=sys.stderr, leave=False,
                            disable=None, mininterval=0.5)

    def update(self, done):
        if self.bar is not None and not self.bar.disable:
            self.bar.update(min(int(done), self.bar.total) - self.bar.n)

    def finish(self):
        if self.bar is not None:
            self.bar.close()
        self.bar = None


def _check_order(order):
    try:
        order = operator.index(order)
    except TypeError:
        raise TypeError(f"order must be an integer, got {order!r}") from None
    if not 1 <= order <= MAX_ORDER:
        raise ValueError(f"order must be between 1 and {MAX_ORDER} (the highest order nplm "
                         f"can load), got {order}")
    return order


def _prune_thresholds(prune, order):
    """lmplz's --prune: non-decreasing per-order thresholds, the last one repeated."""
    if prune is None or len(prune) == 0:
        return np.zeros(order, dtype=np.uint64)
    values = []
    for t in prune:
        try:
            t = operator.index(t) if not isinstance(t, str) else int(t)
        except (TypeError, ValueError):
            raise ValueError(f"bad pruning threshold {t!r}") from None
        if t < 0:
            raise ValueError(f"bad pruning threshold {t} (must be >= 0)")
        values.append(t)
    if len(values) > order:
        raise ValueError(f"pruning thresholds given for orders 1 through {len(values)} "
                         f"but the model only has order {order}")
    if any(a > b for a, b in zip(values, values[1:])):
        raise ValueError("pruning thresholds must be non-decreasing; otherwise substrings "
                         "would be removed, which is bad for query-time data structures")
    if values[0] != 0:
        raise ValueError("unigrams cannot be pruned by count (the first threshold must be 0); "
                         "use limit_vocab_file / --limit_vocab_file to restrict the vocabulary")
    values += [values[-1]] * (order - len(values))
    return np.array(values, dtype=np.uint64)


def _fallback(discount_fallback):
    """None (off), True (lmplz's defaults 0.5 1 1.5) or up to three discounts."""
    if discount_fallback is None or discount_fallback is False:
        return None
    if discount_fallback is True:
        values = list(DEFAULT_FALLBACK)
    else:
        values = list(discount_fallback)
    if not values:
        values = list(DEFAULT_FALLBACK)
    if len(values) > 3:
        raise ValueError("specify at most three fallback discounts: 1, 2, and 3+")
    out = [0.0]
    for i in range(3):
        raw = values[min(i, len(values) - 1)]
        try:
            d = np.float32(float(raw))
        except (TypeError, ValueError):
            raise ValueError(f"bad fallback discount {raw!r}") from None
        if not 0.0 <= d <= i + 1:
            raise ValueError(f"the discount for count {i + 1} was parsed as {float(d):g} "
                             f"which is not in the range [0, {i + 1}]")
        out.append(d)
    return np.array(out, dtype=np.float32)


def _discounts(n, k, fallback, report):
    """Discounts of order k from its counts-of-counts n[0..4] (Chen & Goodman eq. 26),
    in float32 like lmplz; the fallback replaces them when they cannot be computed."""
    problem = None
    for j in (1, 2, 3):
        if n[j] == 0:
            problem = (f"Could not calculate Kneser-Ney discounts for {k}-grams with adjusted "
                       f"count {j + 1} because we didn't observe any {k}-grams with adjusted "
                       f"count {j}; Is this small or artificial data?")
            break
    if problem is None:
        f32 = np.float32
        y = f32(n[1]) / f32(float(n[1]) + 2.0 * float(n[2]))
        out = [f32(0.0)]
        for j in (1, 2, 3):
            d = f32(j) - f32(j + 1) * y * f32(n[j + 1]) / f32(n[j])
            if d < 0.0 or d > j:
                problem = (f"ERROR: {k}-gram discount out of range for adjusted count {j}: "
                           f"{float(d):g}.  This means modified Kneser-Ney smoothing thinks "
                           f"something is weird about your data.")
                break
            out.append(d)
        if problem is None:
            return np.array(out, dtype=np.float32)
    if fallback is None:
        raise DiscountError(problem + "\nTry deduplicating the input.  To override this error "
                            "for e.g. a class-based model, rerun with --discount_fallback "
                            "(Python: discount_fallback=True).")
    report.notice(f"Substituting fallback discounts for order {k}: D1={float(fallback[1]):g} "
                  f"D2={float(fallback[2]):g} D3+={float(fallback[3]):g}")
    return fallback


def _text_name(text):
    if isinstance(text, (str, bytes, os.PathLike)):
        return "-" if os.fspath(text) in ("-", b"-") else os.fspath(text)
    return getattr(text, "name", "<stream>")


def _open_source(text):
    """(binary reader, whether we own it, byte size for the progress bar or 0)."""
    own = isinstance(text, (str, bytes, os.PathLike))
    f = open_binary(_text_name(text)) if own else text
    total = 0
    if isinstance(f, io.BufferedReader):  # plain file (or stdin): a byte-based bar
        try:
            total = os.fstat(f.fileno()).st_size
        except (OSError, ValueError):
            total = 0
    return f, own, total


def _chunks(f, total, report):
    """Yield (bytes of whole lines, number of the chunk's first line) from the binary
    or text reader ``f``.  The last chunk may end without a newline."""
    report.start(total)
    carry = b""
    line = 1
    done = 0
    while True:
        block = f.read(_CHUNK)
        if isinstance(block, str):
            block = block.encode("utf-8")
        if not block:
            break
        done += len(block)
        block = carry + block
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            carry = block
            continue
        carry = block[cut:]
        yield block[:cut], line
        line += block.count(b"\n", 0, cut)
        report.update(done)
    if carry:
        yield carry, line
    report.finish()


def _check_utf8(chunk, name, line):
    try:
        codecs.utf_8_decode(chunk, "strict", True)
    except UnicodeDecodeError as e:
        bad_line = line + chunk.count(b"\n", 0, e.start)
        raise FormatError(f"invalid UTF-8 (byte 0x{chunk[e.start]:02x}); the text must be UTF-8",
                          name, bad_line) from None


def _count(text, order, skip_symbols, report):
    name = _text_name(text)
    counter = _kn.Counter(order, skip_symbols)
    f, own, total = _open_source(text)
    try:
        report.say(f"Reading {name if name != '-' else 'stdin'}")
        _count_chunks(counter, _chunks(f, total, report), name)
    except CompressedDataError:
        raise                       # textio's readers already name the file
    except (EOFError, lzma.LZMAError, zlib.error, gzip.BadGzipFile, OSError) as e:
        if isinstance(e, OSError) and not isinstance(e, gzip.BadGzipFile) and e.errno is not None:
            raise
        raise FormatError(f"corrupt or truncated compressed text ({e})", name) from None
    finally:
        if own and f is not sys.stdin.buffer:
            f.close()
    if counter.tokens == 0:
        what = "is empty" if counter.sentences == 0 else "has no words (only blank lines)"
        raise ValueError(f"{name}: the text {what}; nothing to estimate")
    return counter


def _count_chunks(counter, chunks, name):
    for chunk, line in chunks:
        _check_utf8(chunk, name, line)
        rc = counter.feed(chunk)
        if rc == 0:
            continue
        if rc == -1:
            raise MemoryError("out of memory while counting n-grams")
        if rc == -3:
            raise MemoryError("too many distinct n-grams or words for 32-bit indices")
        if rc == -2:
            at = counter.err_offset
            end = at
            while end < len(chunk) and chunk[end:end + 1] not in b" \t\r\n\0":
                end += 1
            word = chunk[at:end].decode("utf-8")
            raise FormatError(f"special word {word} is not allowed in the text (it is added "
                              f"around every line); pass --skip_symbols (skip_symbols=True) "
                              f"to treat <s>, </s> and <unk> as whitespace",
                              name, line + chunk.count(b"\n", 0, at))
        raise RuntimeError(f"n-gram counting failed with status {rc}")


def _limit_vocab(path, counter, name):
    """1 for every word that is not in the --limit_vocab_file list (never specials)."""
    prune_word = np.ones(counter.vocab_size, dtype=np.uint8)
    prune_word[:3] = 0
    lineno = 0
    try:
        with open_text(path) as f:
            for line in f:
                for word in split_words(line.replace("\0", " ")):
                    i = counter.find(word.encode("utf-8"))
                    if i >= 0:
                        prune_word[i] = 0
    except UnicodeDecodeError:
        raise FormatError("invalid UTF-8 in the vocabulary list", path, lineno + 1) from None
    return prune_word


def estimate(text, order, arpa=None, binary=None, *, discount_fallback=None, prune=None,  # noqa: C901 - runs the estimation stages in order, each optional step in its place
             interpolate_unigrams=True, limit_vocab_file=None, skip_symbols=False,
             verbose_header=False, vocab_pad=0, progress=True, binary_type=None,
             binary_options=None):
    """Estimate an interpolated modified Kneser-Ney model the way lmplz does.

    Parameters
    ----------
    text : str, path or file
        The training text ('-' = stdin; plain, gzip, bz2 or xz), or a readable file
        object; one sentence per line, words separated by spaces.
    order : int
        The model order (lmplz ``-o``).
    arpa : str, optional
        Write an ARPA file there ('-' = stdout; lmplz ``--arpa``).
    binary : str, optional
        Write a binary model there, in one pass (no ARPA read back).
    binary_type : str, optional
        Its format, as ``nplm.build_binary``'s type: "probing" or "trie" (KenLM's
        files, exactly as build_binary writes them from the ARPA) or "nplm"; None:
        nplm's for a name ending in .nplm, else KenLM's probing.
    binary_options : dict, optional
        build_binary's settings for it, as ``nplm.build_binary``'s keywords
        (prob_bits=8, pointer_bits=22, ...).
    discount_fallback : None, True or sequence of float
        True (0.5 1 1.5) or up to three discounts, used for orders whose
        counts-of-counts cannot give discounts (lmplz ``--discount_fallback``); without
        it such data raises ``DiscountError``.
    prune : sequence of int, optional
        Per-order count thresholds, non-decreasing, the first one 0 (lmplz ``--prune``).
    interpolate_unigrams : bool
        False gives the unigram interpolation mass to ``<unk>``.
    limit_vocab_file : str, optional
        Prune every n-gram with a word not listed in this file.
    skip_symbols : bool
        Treat ``<s>``, ``</s>`` and ``<unk>`` in the text as whitespace.
    verbose_header : bool
        Put lmplz's "# Input file / Token count / Smoothing" comments in the ARPA output.
    vocab_pad : int
        Spread the unigram interpolation mass as if the vocabulary had at least this
        many words (lmplz ``--vocab_pad``).
    progress : bool
        Stage headers and statistics on stderr, and progress bars when stderr is a
        terminal.

    Returns
    -------
    NGramTables
        The model (log10 values; n-grams in lmplz's order).
    """
    t0 = time.perf_counter()
    order = _check_order(order)
    thresholds = _prune_thresholds(prune, order)
    if binary is not None:      # bad binary settings fail now, not after the counting
        check_options(resolve_type(binary_type, binary), **(binary_options or {}))
    fallback = _fallback(discount_fallback)
    vocab_pad = operator.index(vocab_pad)
    if vocab_pad < 0:
        raise ValueError("vocab_pad must be >= 0")
    if vocab_pad and not interpolate_unigrams:
        raise ValueError("vocab_pad requires interpolate_unigrams")
    name = _text_name(text)
    for out in (arpa, binary):
        if out is not None and out != "-" and isinstance(text, (str, os.PathLike)) \
                and name != "-" and same_file(out, name):
            raise ValueError(f"refusing to overwrite the input text {name!r} with the model")
    refuse_stdout(binary)      # ('-' for the ARPA is stdout)
    for out in (arpa, binary):
        if out is not None and not hasattr(out, "write") and out != "-":
            folder = os.path.dirname(os.path.abspath(os.fspath(out)))
            if not os.path.isdir(folder):
                raise FileNotFoundError(2, "No such directory for the output", folder)
    if limit_vocab_file is not None and not os.path.exists(limit_vocab_file):
        raise FileNotFoundError(2, "No such file or directory", os.fspath(limit_vocab_file))
    report = _Report(progress, 5 if (arpa is not None or binary is not None) else 4)

    # 1. Count.
    report.stage(1, "Counting and sorting n-grams")
    counter = _count(text, order, skip_symbols, report)
    report.say(f"Unigram tokens {counter.tokens} types {counter.vocab_size}")
    if counter.unk_tokens:
        report.notice(f"Note: <unk> appears {counter.unk_tokens} times in the text; nplm counts it "
                      f"as the unknown word (lmplz would refuse it; skip_symbols treats it as "
                      f"whitespace).")
    if counter.skipped_symbols:
        report.notice(f"Warning: <s>, </s> or <unk> appears {counter.skipped_symbols} times in the "
                      f"input.  All instances of <s>, </s>, and <unk> were treated as whitespace.")
    vocab_size = counter.vocab_size
    prune_word = (_limit_vocab(limit_vocab_file, counter, name) if limit_vocab_file is not None
                  else np.zeros(vocab_size, dtype=np.uint8))
    vocab = counter.words()
    tokens = counter.tokens
    _kn.release_free_memory()
    keys, counts = counter.suffix_sorted()
    del counter
    _kn.release_free_memory()

    # 2. Adjusted counts and discounts.
    report.stage(2, "Calculating and sorting adjusted counts")
    sizes = _kn.adjust_sizes(keys)
    sizes[0] = vocab_size
    if max(sizes) >= 2 ** 31:
        raise MemoryError(f"{max(sizes)} n-grams of one order exceed nplm's 32-bit indices")
    # Orders 2..N-1 get fresh arrays; order N is compacted into keys/counts.
    words = [None] + [np.empty((sizes[k - 1], k), dtype=np.int32) for k in range(2, order)] + [None]
    adj = [np.zeros(s, dtype=np.uint64) for s in sizes[:-1]] + [None]
    parent = [None] + [np.empty(sizes[k - 1], dtype=np.int32) for k in range(2, order + 1)]
    mark = [np.zeros(s, dtype=np.uint8) for s in sizes]
    stats = np.zeros((order, 7), dtype=np.uint64)
    if order == 1:
        words, adj = [None], [np.zeros(vocab_size, dtype=np.uint64)]
    _kn.adjust(keys, counts, words, adj, parent, mark, thresholds, prune_word,
               limit_vocab_file is not None, stats)
    if order > 1:
        words[-1] = keys.view(np.int32)[:sizes[-1]]
        adj[-1] = counts[:sizes[-1]]
    del keys, counts
    _kn.release_free_memory()
    discounts = [_discounts(stats[k - 1, :5], k, fallback, report) for k in range(1, order + 1)]
    kept = [int(stats[k, 6]) for k in range(order)]
    report.say("Statistics:")
    for k in range(order):
        total = f"/{int(stats[k, 5])}" if stats[k, 5] != stats[k, 6] else ""
        d = discounts[k]
        report.say(f"{k + 1} {kept[k]}{total} D1={float(d[1]):g} D2={float(d[2]):g} D3+={float(d[3]):g}")

    # 3-4. Probabilities and back-offs, order by order.
    report.stage(3, "Calculating and sorting initial probabilities")
    report.stage(4, "Calculating and writing order-interpolated probabilities")
    report.start(sum(sizes))
    pruning = bool(thresholds.any()) or limit_vocab_file is not None
    threads = max(1, min(2, os.cpu_count() or 1))   # the loops are memory-bound
    uniform = _kn.uniform_probability(max(vocab_pad, kept[0] - 1))
    prob = np.empty(vocab_size, dtype=np.float32)
    logprob = [np.empty(s, dtype=np.float32) for s in sizes]
    backoff = [np.zeros(s, dtype=np.float32) for s in sizes]
    _kn.unigram_probs(adj[0], mark[0], discounts[0], bool(interpolate_unigrams),
                      uniform, prob, logprob[0])
    done = sizes[0]
    report.update(done)
    ctx_prev = None
    for k in range(2, order + 1):
        i = k - 1
        adj[i - 1] = None          # each array is dropped as soon as it was last used
        if k == 2:
            ctx = np.ascontiguousarray(words[1][:, 0])
        else:
            cb = _kn.child_begin(parent[i - 1], sizes[i - 2])
            ctx = np.empty(sizes[i], dtype=np.int32)
            if _kn.link_contexts(words[i], parent[i], ctx_prev, words[i - 1], cb, ctx, threads) != 0:
                raise RuntimeError(f"internal error: a context of order {k} is missing")
            del cb
        parent[i - 1] = ctx_prev = None
        _kn.release_free_memory()
        prob_k = np.empty(sizes[i], dtype=np.float32)
        _kn.order_probs(adj[i], mark[i], ctx, parent[i], discounts[i], prob, pruning, threads,
                        prob_k, logprob[i], backoff[i - 1])
        prob, ctx_prev = prob_k, ctx
        del prob_k, ctx
        done += sizes[i]
        report.update(done)
    del prob, ctx_prev, adj, parent
    _kn.release_free_memory()
    report.finish()

    # Keep what survived pruning; renumber words if unigrams were pruned.
    keep1 = mark[0] == 0
    if keep1.all():
        new_id = None
    else:
        new_id = np.cumsum(keep1, dtype=np.int64).astype(np.int32) - 1
        vocab = [w for w, k in zip(vocab, keep1) if k]
    ids = [np.arange(len(vocab), dtype=np.int32)[:, None]]
    lp = [logprob[0] if new_id is None else logprob[0][keep1]]
    bo = [backoff[0] if new_id is None else backoff[0][keep1]]
    for i in range(1, order):
        m = mark[i]
        if m.any():
            keep = m == 0
            w, p, b = words[i][keep], logprob[i][keep], backoff[i][keep]
        else:
            w, p, b = words[i], logprob[i], backoff[i]
        if new_id is not None:
            w = new_id[w]
        ids.append(np.ascontiguousarray(w, dtype=np.int32))
        lp.append(p)
        bo.append(b)
        words[i] = logprob[i] = backoff[i] = None
    if order > 0:
        bo[-1] = np.zeros(len(lp[-1]), dtype=np.float32)
    comments = []
    if verbose_header:
        comments = [f"Input file: {name}", f"Token count: {tokens}",
                    "Smoothing: Modified Kneser-Ney"]
    tables = NGramTables(vocab=vocab, ids=ids, logprob=lp, backoff=bo, comments=comments)

    if arpa is not None:
        report.stage(5, "Writing ARPA model")
        if arpa == "-":
            write_arpa(tables, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            write_arpa(tables, arpa)
    if binary is not None:
        report.stage(5, "Writing binary model")
        build_binary(tables, binary, binary_type, **(binary_options or {}))
    report.say(f"Name:nplm\tWall:{time.perf_counter() - t0:.3f} s")
    return tables
