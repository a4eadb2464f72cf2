"""Back-off n-gram models: building the probing tables from NGramTables (ARPA,
Kneser-Ney, distillation) and the binary form that maps them straight back.

Word ids follow KenLM: ``<unk>`` is 0 and the other words keep their ARPA order
from 1, so states compare in the same order as kenlm's.
"""
import errno
import math
import sys
import warnings

import numpy as np

from nplm import _kernels
from nplm.backoff import _query
from nplm.backoff.tables import first_rows
from nplm.errors import FormatError
from nplm.io import container
from nplm.io.resources import check_available, check_binary_populate

KIND = "backoff"
FORMAT = 1
# Hash table buckets per entry.  KenLM uses 1.5; 1.45 keeps a loaded binary's
# resident memory at or below KenLM's probing binary at a negligible probing cost
# (load factor 0.69 instead of 0.67; four entries share a cache line anyway).
PROBING_MULTIPLIER = 1.45
# KenLM's default probability for an ARPA without <unk> (config unknown_missing_logprob).
UNKNOWN_MISSING_LOGPROB = -100.0
_UNK = ("<unk>", "<UNK>")


class BackoffData:
    """Everything a loaded back-off model consists of: the scorer, the vocabulary,
    and the arrays behind them (owned, or views into a mapped binary)."""

    def __init__(self, core, vocab, arrays, config):
        self.core = core
        self.vocab = vocab
        self.arrays = arrays
        self.config = config


def _where(tables, order, index):
    if tables.first_line is not None and order - 1 < len(tables.first_line):
        return tables.source, tables.first_line[order - 1] + index
    return tables.source, None


def check_multiplier(multiplier, counts=None):
    """Refuse a probing multiplier KenLM would refuse (it must be > 1.0; nplm also
    wants it finite), and, given the n-gram counts, probing tables that cannot fit in
    memory: better a clear error up front than a failed allocation (or swapping)."""
    multiplier = float(multiplier)
    if not (math.isfinite(multiplier) and multiplier > 1.0):
        raise ValueError(f"the probing multiplier must be a finite number > 1.0, not {multiplier!r}")
    if counts is None or len(counts) < 2:
        return
    # what build_backoff_tables allocates: 16 bytes per middle-order bucket, 12 per highest
    needed = sum((c * multiplier + 2) * (12 if n == len(counts) else 16) for n, c in enumerate(counts[1:], 2))
    what = f"probing hash tables with multiplier {multiplier:g} for {sum(counts[1:]):,} n-grams"
    advice = f"use a smaller multiplier (build-binary -p; the default is {PROBING_MULTIPLIER})"
    if needed >= 2 ** 60:
        raise OSError(errno.ENOMEM, f"{what} would need about {needed / 2 ** 40:.3g} TiB; {advice}")
    check_available(needed, what, advice)


def from_tables(tables, multiplier=PROBING_MULTIPLIER, messages=sys.stderr):  # noqa: C901 - checks of every table before the build, each with its message
    """Build the query structures for ``tables`` (an NGramTables)."""
    tables.validate()
    order = tables.order
    if order > _kernels.QUERY_MAX_ORDER:
        raise FormatError(f"order {order} is above the highest order nplm can load "
                          f"({_kernels.QUERY_MAX_ORDER})", tables.source)
    check_multiplier(multiplier, [int(c) for c in tables.counts])
    words = list(tables.vocab)
    is_unk = np.fromiter((w in _UNK for w in words), dtype=bool, count=len(words))
    if is_unk[0] and not is_unk[1:].any():
        remap = None                      # lmplz order: <unk> first, ids unchanged
        engine_words = ["<unk>"] + words[1:]
    else:
        remap = np.zeros(len(words), dtype=np.int32)
        keep = np.flatnonzero(~is_unk)
        remap[keep] = np.arange(1, len(keep) + 1, dtype=np.int32)
        engine_words = ["<unk>"] + [words[i] for i in keep]
    for special in ("<s>", "</s>"):
        if special not in words:
            raise FormatError(f"the model has no {special} unigram (KenLM requires <s> and </s>)",
                              tables.source)
    uni = np.zeros((len(engine_words), 2), dtype=np.float32)
    if remap is None:
        uni[:, 0] = tables.logprob[0]
        uni[:, 1] = tables.backoff[0]
    else:
        if not is_unk.any():
            uni[0] = (UNKNOWN_MISSING_LOGPROB, 0.0)
            if messages is not None:
                print(f"The ARPA file is missing <unk>.  Substituting log10 probability "
                      f"{UNKNOWN_MISSING_LOGPROB:g}.", file=messages)
        uni[remap, 0] = tables.logprob[0]
        uni[remap, 1] = tables.backoff[0]
    ids = []
    for k in range(1, order):
        a = tables.ids[k] if remap is None else remap[tables.ids[k]]
        ids.append(np.ascontiguousarray(a, dtype=np.int32))
    mids, longest = _build(tables, words, order, uni, ids, multiplier)
    if remap is not None and not is_unk.any():
        # KenLM substitutes the missing <unk> after loading, with back-off +0.0,
        # which marks it as extending: the state after an unknown word keeps
        # <unk> (length 1), not the null state.  Same futures either way, but
        # which states compare equal (and their hashes) is kenlm's.
        uni[0] = (UNKNOWN_MISSING_LOGPROB, 0.0)
    try:
        vocab_arrays = _kernels.build_vocab_arrays(engine_words, first_wins=True)
    except ValueError as e:
        raise FormatError(str(e), tables.source) from None
    vocab = _kernels.Vocab(*vocab_arrays)
    config = {"format": FORMAT, "order": order, "counts": [int(c) for c in tables.counts],
              "bos": int(vocab.id("<s>")), "eos": int(vocab.id("</s>"))}
    arrays = {"uni": uni}
    for k, m in enumerate(mids):
        arrays[f"mid{k + 2}"] = m
    if longest is not None:
        arrays["longest"] = longest
    names = ("vocab_keys", "vocab_vals", "vocab_offsets", "vocab_blob")
    arrays.update(zip(names, vocab_arrays))
    return _assemble(config, arrays, vocab)


def _assemble(config, arrays, vocab=None):
    order = config["order"]
    if vocab is None:
        vocab = _kernels.Vocab(arrays["vocab_keys"], arrays["vocab_vals"],
                               arrays["vocab_offsets"], arrays["vocab_blob"])
    core = _query.BackoffCore(order, arrays["uni"], [arrays[f"mid{n}"] for n in range(2, order)],
                                arrays.get("longest"), config["bos"], config["eos"])
    return BackoffData(core, vocab, arrays, config)


def save(data, path):
    """Write a loaded back-off model as an nplm binary (atomically)."""
    container.write(path, KIND, data.config, data.arrays)


def load_binary(path, populate=False, copy=False):  # noqa: C901 - checks of every mapped array against the header, each with its message
    """Map a back-off nplm binary written by ``save`` (``copy``: read it into
    private memory instead; container.read)."""
    if populate:
        # Reading in more than fits would swap the machine to death: refuse first.
        check_binary_populate(path)
    c = container.read(path, expect_kind=KIND, populate=populate and not copy, copy=copy)
    cfg = c.config
    try:
        if cfg.get("format") != FORMAT:
            raise FormatError(f"back-off table format {cfg.get('format')!r}, this nplm reads {FORMAT}", path)
        order = int(cfg["order"])
        if not 1 <= order <= _kernels.QUERY_MAX_ORDER:
            raise FormatError(f"order {order} outside 1..{_kernels.QUERY_MAX_ORDER}", path)
        needed = ["uni", "vocab_keys", "vocab_vals", "vocab_offsets", "vocab_blob"]
        needed += [f"mid{n}" for n in range(2, order)] + (["longest"] if order >= 2 else [])
        missing = [n for n in needed if n not in c.arrays]
        if missing:
            raise FormatError(f"missing arrays {missing}", path)
        a = c.arrays
        expect = {"uni": np.float32, "vocab_keys": np.uint64, "vocab_vals": np.uint32,
                  "vocab_offsets": np.int64, "vocab_blob": np.uint8, "longest": np.uint32}
        for name, dt in expect.items():
            if name in a and a[name].dtype != dt:
                raise FormatError(f"array {name} has dtype {a[name].dtype}, expected {np.dtype(dt)}", path)
        v = a["uni"].shape[0]
        if a["uni"].ndim != 2 or a["uni"].shape[1] != 2 or a["vocab_offsets"].shape != (v + 1,):
            raise FormatError("vocabulary and unigram table sizes disagree", path)
        offs = a["vocab_offsets"]
        if offs[0] != 0 or offs[-1] != a["vocab_blob"].shape[0] or (np.diff(offs) < 0).any():
            raise FormatError("corrupt vocabulary offsets", path)
        if a["vocab_vals"].shape != a["vocab_keys"].shape or (a["vocab_vals"] >= v).any():
            raise FormatError("corrupt vocabulary table", path)
        if not (0 <= int(cfg["bos"]) < v and 0 <= int(cfg["eos"]) < v):
            raise FormatError("bad <s>/</s> ids", path)
        for n in range(2, order):
            if a[f"mid{n}"].dtype != np.uint64:
                raise FormatError(f"array mid{n} has dtype {a[f'mid{n}'].dtype}", path)
        return _assemble(cfg, a)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, FormatError):
            raise
        raise FormatError(f"malformed back-off model ({e})", path) from None


def _build(tables, words, order, uni, ids, multiplier, rows=None):
    """The probing tables; ``uni`` gets the extension marks.  A model whose n-grams
    lack many suffixes (pruned, or written by hand) needs blank entries beyond the
    multiplier's room, where KenLM gives up (ProbingSizeException): nplm then sizes
    each middle order for its n-grams plus one blank per longer n-gram, the most
    there can be.  ``rows``: the rows of each order from 2 kept in ``ids``, when an
    n-gram listed again was dropped."""
    probs = [np.ascontiguousarray(p if rows is None else p[r], np.float32)
             for p, r in zip(tables.logprob[1:], rows or [None] * order)]
    backoffs = [np.ascontiguousarray(b if rows is None else b[r], np.float32)
                for b, r in zip(tables.backoff[1:], rows or [None] * order)]
    counts = [len(p) for p in probs]
    for entries in (None, [sum(counts[k:]) for k in range(order - 2)]):
        attempt = uni.copy()
        try:
            mids, longest = _query.build_backoff_tables(order, attempt, ids, probs, backoffs,
                                                          multiplier, entries)
        except _query._BuildError as e:
            index = e.index if rows is None else int(rows[e.order - 2][e.index])
            path, line = _where(tables, e.order, index)
            gram = " ".join(words[i] for i in tables.ids[e.order - 1][index])
            if e.code == e.DUPLICATE and rows is None:
                rows = [first_rows(a) for a in ids]
                again = sum(len(a) - len(r) for a, r in zip(ids, rows))
                warnings.warn(f"{path}:{line}: {again} n-gram{'s' if again > 1 else ''} listed again (one: {e.order}-gram "
                              f"\"{gram}\"); as in KenLM's probing tables, the first entry is the one used",
                              stacklevel=2)
                return _build(tables, words, order, uni, [a[r] for a, r in zip(ids, rows)], multiplier, rows)
            if e.code == e.DUPLICATE:
                raise FormatError(f"duplicate {e.order}-gram \"{gram}\"", path, line) from None
            if e.code == e.NO_CONTEXT:
                raise FormatError(f"the context of every {e.order}-gram should appear as a "
                                  f"{e.order - 1}-gram, but \"{gram}\"'s does not", path, line) from None
            if entries is not None:
                raise FormatError("too many n-grams whose suffixes were pruned", path, line) from None
            continue
        uni[...] = attempt
        return mids, longest


def build_binary(tables, path, multiplier=PROBING_MULTIPLIER):
    """NGramTables -> nplm binary file."""
    save(from_tables(tables, multiplier), path)
