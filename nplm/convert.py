"""``nplm convert IN OUT``: between ARPA, nplm back-off binaries, nplm neural binaries
(float32, float16, int8) and the ISI NPLM toolkit's text format.

Formats are detected from the input's content (container magic and kind, ARPA's
``\\data\\``, ISI's ``\\config``) and chosen for the output by ``to`` or the output
name (.arpa[.gz|.bz2|.xz] -> ARPA, .isi/.nnlm -> ISI, .nplm/.bin/.binary -> nplm
binary of the input's kind, float32 for a neural model; otherwise the natural
counterpart of the input).  Every output is written atomically, and a conversion
never overwrites its own input.

nplm binary -> ARPA: the binary holds 64-bit hashes of the n-grams, not their words,
so the n-grams are recovered by search: an n-gram w_1..w_n is a context
(w_1..w_{n-1}, flagged as extending right) joined with a lower n-gram
(w_2..w_n, flagged as extending left) on their shared middle, and kept when its hash
is in the table.  The flags are KenLM's, so the candidates are few except for
bigrams (contexts x words).  A pruned model's binary also holds KenLM's "blank"
entries for missing suffixes; they come back as n-grams with their backed-off
probability, which leaves every score unchanged.
"""
import os

import numpy as np

from nplm.backoff.arpa import KENLM_MAGIC, NPLM_DAMAGED, NPLM_MAGIC, read_arpa, write_arpa
from nplm.backoff.binary import build_binary, load_binary
from nplm.backoff.kenlm.export import kenlm_tables
from nplm.backoff.tables import NGramTables, row_groups
from nplm.compose.distil import probe_groups
from nplm.compose.interpolate import is_spec
from nplm.errors import FormatError
from nplm.io import container
from nplm.io.atomic import same_file
from nplm.io.files import open_binary
from nplm.io.resources import ThreadPool
from nplm.neural import isi
from nplm.neural import quantized_files as quantize
from nplm.neural.network import NeuralNet

FORMATS = ("arpa", "binary", "neural", "float16", "int8", "isi")


def detect(path):
    """The format of an existing model file: 'binary' (back-off), 'neural' (float32),
    'float16'/'int8' (quantised neural), 'arpa', 'isi' or 'kenlm' (KenLM's binary)."""
    if container.is_container(path):
        c = container.read(path)
        if c.kind == "backoff":
            return "binary"
        if c.kind == "neural":
            q = c.config.get("quantized")
            return q["dtype"] if q else "neural"
        raise FormatError(f"nplm binary of kind {c.kind!r} cannot be converted", path)
    with open_binary(path) as f:
        head = f.read(1 << 16)
    if head.startswith(KENLM_MAGIC):
        return "kenlm"
    if head.startswith(NPLM_MAGIC[:5]):
        raise FormatError(NPLM_DAMAGED, path)
    if container.altered_magic(head):
        raise FormatError(container.ALTERED_MAGIC, path)
    for raw in head.split(b"\n"):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        if line == b"\\data\\":
            return "arpa"
        if line == b"\\config":
            return "isi"
        break
    if is_spec(path):
        raise FormatError("this is an interpolation spec (a mixture of models), which no single model format "
                          "holds: `nplm distil SPEC --text TRAIN --order N --arpa OUT.arpa` turns any model, "
                          "mixtures included, into an ARPA back-off table (convertible from there)", path)
    raise FormatError("not a model file nplm can convert (no ARPA \\data\\, ISI \\config or nplm header)", path)


def backoff_tables(path, fmt):
    """The NGramTables of a back-off model file of format ``fmt`` ('arpa', 'binary'
    or 'kenlm', as detect() names them)."""
    if fmt == "kenlm":
        return kenlm_tables(path)
    return read_arpa(path) if fmt == "arpa" else tables_from_binary(path)


def target_format(src_fmt, out, to):
    if to is not None:
        if to not in FORMATS:
            raise ValueError(f"unknown output format {to!r}; choose from {FORMATS}")
        return to
    name = os.fspath(out).lower()
    for ext in (".gz", ".bz2", ".xz"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    if name.endswith(".arpa"):
        return "arpa"
    if name.endswith((".isi", ".nnlm")):
        return "isi"
    if name.endswith((".nplm", ".bin", ".binary")):
        # an nplm binary of the input's kind (as distil's --arpa reads these names)
        return "binary" if src_fmt in ("arpa", "binary", "kenlm") else "neural"
    return {"arpa": "binary", "binary": "arpa", "kenlm": "arpa", "isi": "neural", "neural": "isi",
            "float16": "neural", "int8": "neural"}[src_fmt]


def convert(src, dst, to=None, text=None, messages=None):  # noqa: C901 - one branch per (source, target) format pair
    """Convert model file ``src`` to ``dst``; returns (source format, target format,
    report dict).  ``text`` (optional) measures the perplexity change of a neural
    conversion (quantisation, or ISI output read back); a back-off conversion changes
    no value, and is refused ``text``.  ``messages(text)`` hears what an ISI file
    leaves out or adds, and fallback normaliser tables that a quantisation leaves out
    because they no longer match the weights (default: what is left out as Python
    warnings)."""
    src, dst = os.fspath(src), os.fspath(dst)
    if os.path.exists(dst) and same_file(src, dst):
        raise ValueError(f"refusing to overwrite the input {src!r}")
    if text is not None and os.path.exists(dst) and same_file(text, dst):
        raise ValueError(f"refusing to overwrite the input {text!r}")
    sf = detect(src)
    tf = target_format(sf, dst, to)
    report = {}
    backoff_kinds, neural_kinds = ("arpa", "binary", "kenlm"), ("neural", "float16", "int8", "isi")
    if sf in backoff_kinds and tf in ("float16", "int8"):
        raise ValueError(f"cannot convert {sf} to {tf}: float16 and int8 quantise neural models only, and "
                         f"{src!r} is a back-off model")
    if (sf in backoff_kinds) != (tf in backoff_kinds):
        if sf in backoff_kinds:
            raise ValueError(f"cannot convert {sf} to {tf}: a back-off table cannot become a neural network "
                             "(`nplm train` trains one)")
        raise ValueError(f"cannot convert {sf} to {tf}: a back-off table and a neural network are different "
                         "models (use `nplm distil` to turn a neural model into a back-off table)")
    if text is not None and sf in backoff_kinds:
        raise ValueError(f"--text measures the perplexity change of a neural model's conversion; {sf} -> {tf} "
                         "keeps every n-gram and value, so there is nothing to measure")
    if sf in backoff_kinds:
        tables = backoff_tables(src, sf)
        if tf == "arpa":
            write_arpa(tables, dst)
        else:
            build_binary(tables, dst)
        report["ngrams"] = [int(c) for c in tables.counts]
        return sf, tf, report
    assert tf in neural_kinds
    if sf == "isi":
        tmp_net, extra_config, extra_arrays = isi.to_neural(isi.read_isi(src))
        if tf == "isi":
            isi.write_isi(isi.from_neural(tmp_net, extra_config, extra_arrays), dst)
        else:
            tmp_net.save(dst, extra_config=extra_config, extra_arrays=extra_arrays)
            if tf in ("float16", "int8"):
                quantize.quantize_file(dst, dst, tf, messages)
        ref_net = tmp_net
    elif tf == "isi":
        isi.nplm_to_isi(src, dst, messages)
        ref_net = NeuralNet.load(src) if text is not None else None
    else:
        ref_net = quantize.quantize_file(src, dst, "float32" if tf == "neural" else tf, messages)
    if text is not None:
        # the output as nplm reads it: an ISI file through the same mapping as its conversion
        out_net = isi.to_neural(isi.read_isi(dst))[0] if tf == "isi" else NeuralNet.load(dst)
        before, after = quantize.perplexity_change(ref_net, out_net, text)
        report.update(perplexity_before=before, perplexity_after=after,
                      perplexity_change=(after - before) / before)
    report["bytes_before"] = os.path.getsize(src)
    report["bytes_after"] = os.path.getsize(dst)
    return sf, tf, report


# ---------------------------------------------------------------------------------
# Back-off binary -> NGramTables.

def _live_entries(a, n, order):
    if n < order:
        return int((a[f"mid{n}"][:, 0] != 0).sum())
    l = a["longest"]
    return int(((l[:, 0] != 0) | (l[:, 1] != 0)).sum())


def tables_from_binary(path, threads=2):
    """NGramTables of an nplm back-off binary (see the module docstring)."""
    data = load_binary(path)
    a, order = data.arrays, int(data.config["order"])
    words = data.vocab.words()
    V = len(words)
    uni = np.asarray(a["uni"], dtype=np.float32)
    ids = [np.arange(V, dtype=np.int32)[:, None]]
    lps = [-np.abs(uni[:, 0]) + np.float32(0.0)]      # stored signs are KenLM's flags; -0.0 -> 0.0
    bos = [uni[:, 1] + np.float32(0.0)]               # KenLM's -0.0 "extends nothing" -> 0.0
    for n in range(2, order + 1):
        P = ids[-1]
        if n == 2:
            pg = np.zeros(len(P), np.int64)
            cand = np.arange(V, dtype=np.int32)
            wg = np.zeros(V, np.int64)
        else:
            pg, wg = row_groups(P[:, 1:], P[:, :-1])
            cand = P[:, -1]
        po, wo = np.argsort(pg, kind="stable"), np.argsort(wg, kind="stable")
        P, pg = np.ascontiguousarray(P[po]), pg[po]
        cand, wg = np.ascontiguousarray(cand[wo], dtype=np.int32), wg[wo]
        G = int(max(pg.max(initial=-1), wg.max(initial=-1))) + 1
        ctx_off = np.searchsorted(pg, np.arange(G + 1)).astype(np.int64)
        word_off = np.searchsorted(wg, np.arange(G + 1)).astype(np.int64)
        cap = _live_entries(a, n, order)
        # Two threads (the kernel runs without the GIL), splitting the contexts where
        # half of the probes are done.
        work = np.cumsum(np.diff(word_off)[pg])
        cut = int(np.searchsorted(work, work[-1] / 2)) if len(work) else 0
        spans = [(0, cut), (cut, len(P))] if threads > 1 and len(P) > 1 else [(0, len(P))]

        def probe(span):
            lo, hi = span
            bufs = (np.empty(cap, np.int64), np.empty(cap, np.int32), np.empty(cap, np.float32),  # noqa: B023 - called within this iteration
                    np.empty(cap, np.float32))  # noqa: B023
            got = probe_groups(data.core, P, np.clip(ctx_off, lo, hi), cand, word_off, *bufs)  # noqa: B023
            return got, bufs
        with ThreadPool(len(spans)) as pool:
            results = list(pool.map(probe, spans))
        found = sum(g for g, _ in results) if all(g >= 0 for g, _ in results) else -1
        if found != cap:
            raise FormatError(f"recovered {found if found >= 0 else 'more than ' + str(cap)} {n}-grams, the "
                              f"table holds {cap} (inconsistent back-off flags?)", path)
        out_ctx, out_word, out_prob, out_bo = (np.concatenate([b[i][:g] for g, b in results]) for i in range(4))
        r = np.column_stack([P[out_ctx], out_word]).astype(np.int32)
        o = np.lexsort(r.T[::-1])
        ids.append(np.ascontiguousarray(r[o]))
        lps.append(out_prob[o] + np.float32(0.0))
        bos.append(out_bo[o] + np.float32(0.0) if n < order else np.zeros(cap, np.float32))
    return NGramTables(vocab=words, ids=ids, logprob=lps, backoff=bos, source=os.fspath(path))
