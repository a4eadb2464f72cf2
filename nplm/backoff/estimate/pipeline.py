"""``estimate``: interpolated modified Kneser-Ney estimation that reproduces KenLM's
``lmplz``, in stages: count (``count.py``), adjust (``adjust.py``), discount
(``discount.py``), interpolate (``interpolate.py``), write (``write.py``).

Everything stays in memory when the counts fit in the memory budget (``-S``;
lmplz's default, 80% of physical memory, without it).  Otherwise counting spills
sorted runs to a temporary folder (``-T``) and the later stages run part by part
(``partitioned.py``); the ARPA is the same, byte for byte.

Differences from lmplz, all deliberate:
  * ``<unk>`` in the text is counted as the unknown word (lmplz refuses it);
    ``skip_symbols=True`` treats ``<s>``, ``</s>`` and ``<unk>`` as whitespace as
    lmplz's ``--skip_symbols`` does.  ``<s>``/``</s>`` in the text are an error.
  * A last line without a newline is a sentence like the others (lmplz drops its
    ``</s>``).
  * A unigram pruning threshold other than 0 is refused (lmplz's own source says
    unigrams cannot be pruned; use ``limit_vocab_file``).
"""
import contextlib
import os
import resource
import sys
import time

import numpy as np

from nplm.backoff import _kn
from nplm.backoff.arpa import write_sections
from nplm.backoff.estimate import count as counting
from nplm.backoff.estimate.adjust import adjust
from nplm.backoff.estimate.config import EstimateConfig
from nplm.backoff.estimate.counts import runs_from_files
from nplm.backoff.estimate.discount import discounts as order_discounts
from nplm.backoff.estimate.distributed import estimate_dask
from nplm.backoff.estimate.interpolate import interpolate
from nplm.backoff.estimate.partitioned import estimate_partitioned
from nplm.backoff.estimate.report import Report
from nplm.backoff.estimate.write import header_comments, stream_arpa, tables, write_outputs
from nplm.backoff.kenlm.write import check_options, resolve_type
from nplm.backoff.tables import NGramTables
from nplm.errors import FormatError
from nplm.io.atomic import refuse_stdout, same_file, temp_folder

# Peak bytes of the in-memory stages per distinct highest-order n-gram, over 4
# bytes per word of an n-gram (measured: 111 bytes per distinct 5-gram on 6.4M words).
IN_MEMORY_BYTES_PER_WORD = 18
# Bytes per word of the vocabulary's per-word arrays (counts, marks, probabilities).
PER_WORD_BYTES = 40


def check_outputs(text, arpa, binary):
    for out in (arpa, binary):
        if out is None or hasattr(out, "write") or out == "-":
            continue
        for source in counting.source_names(text) if text is not None else ():
            if isinstance(source, str) and source != "-" and same_file(out, source):
                raise ValueError(f"refusing to overwrite the input text {source!r} with the model")
        folder = os.path.dirname(os.path.abspath(os.fspath(out)))
        if not os.path.isdir(folder):
            raise FileNotFoundError(2, "No such directory for the output", folder)
    refuse_stdout(binary)      # ('-' for the ARPA is stdout)


def baseline_bytes():
    """What the process holds before estimating (the interpreter, numpy, nplm)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def in_memory_peak(counter):
    return counter.distinct_ngrams * IN_MEMORY_BYTES_PER_WORD * (counter.order + 2)


def report_counts(counter, report, config):
    report.say(f"Unigram tokens {counter.tokens} types {counter.vocab_size}")
    if counter.unk_tokens and config.refuse_unk:
        raise FormatError("Special word <unk> is not allowed in the corpus.  I plan to support models "
                          "containing <unk> in the future.  Pass --skip_symbols to convert these symbols "
                          "to whitespace.")
    if counter.unk_tokens:
        report.notice(f"Note: <unk> appears {counter.unk_tokens} times in the text; nplm counts it "
                      f"as the unknown word (lmplz would refuse it; skip_symbols treats it as "
                      f"whitespace).")
    if counter.skipped_symbols:
        report.notice(f"Warning: <s>, </s> or <unk> appears {counter.skipped_symbols} times in the "
                      f"input.  All instances of <s>, </s>, and <unk> were treated as whitespace.")


def prune_words(counter, config, name):
    if config.limit_vocab_file is None:
        return np.zeros(counter.vocab_size, dtype=np.uint8)
    return counting.limit_vocab(config.limit_vocab_file, counter.find, counter.vocab_size)


def in_memory(counter, config, report, comments):
    """Stages 2-4 with every array in memory; returns NGramTables."""
    vocab_size = counter.vocab_size
    prune_word = prune_words(counter, config, comments)
    vocab = counter.words()
    _kn.release_free_memory()
    keys, counts = counter.suffix_sorted()
    _kn.release_free_memory()
    report.stage(2, "Calculating and sorting adjusted counts")
    stats = np.zeros((config.order, 7), dtype=np.uint64)
    adjusted = adjust(keys, counts, config, prune_word, stats,
                      np.zeros(vocab_size, dtype=np.uint64), np.zeros(vocab_size, dtype=np.uint8))
    del keys, counts
    _kn.release_free_memory()
    discounts, kept = order_discounts(stats, config, report)
    report.stage(3, "Calculating and sorting initial probabilities")
    report.stage(4, "Calculating and writing order-interpolated probabilities")
    mark, words = adjusted.mark, adjusted.words
    logprob, backoff = interpolate(adjusted, discounts, kept, config, report)
    return tables(vocab, words, logprob, backoff, mark, comments)


def partitioned(counts, folder, config, report, comments, budget, arpa, binary):
    """Stages 2-5 part by part."""
    if config.collapse_values:
        raise MemoryError(f"collapse_values needs the model estimated in memory, and the counts outgrew the "
                          f"memory budget of {config.memory} bytes: raise it (lmplz -S)")
    counter = counts.counter
    prune_word = prune_words(counter, config, counts.name)
    vocab = counter.words()
    if counter.distinct_ngrams:
        counts.spill(folder)
    blocks, kept_vocab, kept = estimate_partitioned(counts, config, report, vocab, prune_word, budget)
    return write_streamed(blocks, kept_vocab, kept, comments, config, report, arpa, binary)


def write_streamed(blocks, vocab, kept, comments, config, report, arpa, binary):
    """Stage 5 from a model in blocks: the ARPA is streamed, a binary needs the model
    in memory.  Returns NGramTables, or None when only an ARPA file was written."""
    if arpa is not None:
        report.stage(5, "Writing ARPA model")
        if arpa == "-":
            stream_arpa_to(sys.stdout.buffer, vocab, kept, comments, blocks)
        else:
            stream_arpa(arpa, vocab, kept, comments, blocks)
        if binary is None:
            return None
    model = gather(vocab, kept, comments, blocks, config.order)
    write_outputs(model, None, binary, report)
    return model


def on_cluster(client, text, config, report, arpa, binary):
    """Stages 1-5 on a Dask cluster (``distributed.py``)."""
    report.stage(1, "Counting and sorting n-grams")
    blocks, vocab, kept, vocabulary = estimate_dask(
        client, text, config, report, lambda v: prune_words(v, config, None))
    comments = header_comments(config, counting.text_name(text), vocabulary.tokens)
    return write_streamed(blocks, vocab, kept, comments, config, report, arpa, binary)


def stream_arpa_to(f, vocab, kept, comments, blocks):
    write_sections(f, vocab, kept, comments, blocks)
    f.flush()


def gather(vocab, kept, comments, blocks, order):
    """NGramTables from the parts' blocks (the whole model in memory)."""
    ids, lp, bo = [], [], []
    for k in range(order):
        parts = list(blocks(k))
        ids.append(np.concatenate([p[0] for p in parts]))
        lp.append(np.concatenate([np.asarray(p[1]) for p in parts]))
        bo.append(np.concatenate([np.asarray(p[2]) for p in parts]))
    return NGramTables(vocab=vocab, ids=ids, logprob=lp, backoff=bo, comments=comments)


def estimate(text, order, arpa=None, binary=None, *, discount_fallback=None, prune=None,
             interpolate_unigrams=True, limit_vocab_file=None, skip_symbols=False,
             verbose_header=False, vocab_pad=0, progress=True, memory=None, temp_prefix=None,
             counts=None, client=None, binary_type=None, binary_options=None, refuse_unk=False,
             collapse_values=False):
    """Estimate an interpolated modified Kneser-Ney model the way lmplz does.

    Parameters
    ----------
    text : str, path, file or list
        The training text ('-' = stdin; plain, gzip, bz2 or xz), a glob pattern, a
        readable file object, or a list of these (read in turn, as one text); one
        sentence per line, words separated by spaces.
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
    memory : int or str, optional
        The memory budget (lmplz ``-S``): bytes, or a size such as "2G" or "80%" of
        physical memory (the default).  Counts that outgrow it spill to temporary
        files and the model is estimated part by part, to the same bytes.
    temp_prefix : str, optional
        The folder for those files (lmplz ``-T``; default TMPDIR or /tmp); they are
        removed on success, failure and Ctrl-C.
    counts : list of str, optional
        Instead of ``text`` (None): counts files written by ``nplm count``, merged in
        the order given; the model of the texts they counted, taken in that order.
    refuse_unk : bool
        Fail, as KenLM's lmplz does, when ``<unk>`` is in the text and ``skip_symbols``
        is off (by default nplm counts it as the unknown word).
    collapse_values : bool
        Collapse each n-gram's probability and back-off into one value q that gives
        the same sentence probabilities (lmplz ``--collapse_values``; Heafield, Koehn
        and Lavie 2012): the model's log10 probabilities are q, its back-offs 0.
        Only for estimates that fit in the memory budget (not part by part, nor on
        a cluster), and not with ``binary``.
    client : dask.distributed.Client, optional
        Estimate on its cluster (files the workers can read; ``pip install
        nplm[dask]``): the same model.

    Returns
    -------
    NGramTables or None
        The model (log10 values; n-grams in lmplz's order), or None when the counts
        spilled and only an ARPA file was asked for (the model was never whole in
        memory).
    """
    t0 = time.perf_counter()
    config = EstimateConfig.make(order, discount_fallback=discount_fallback, prune=prune,
                                 interpolate_unigrams=interpolate_unigrams,
                                 limit_vocab_file=limit_vocab_file, skip_symbols=skip_symbols,
                                 verbose_header=verbose_header, vocab_pad=vocab_pad, memory=memory,
                                 temp_prefix=temp_prefix, progress=progress, refuse_unk=refuse_unk,
                                 collapse_values=collapse_values)
    if (text is None) == (counts is None):
        raise ValueError("give either a text or counts files, not both")
    check_outputs(text, arpa, binary)
    if collapse_values and (client is not None or binary is not None):
        raise ValueError("collapse_values: q values are written to ARPA or KenLM's intermediate files "
                         "only (no binary), and estimated in memory (no Dask cluster)")
    if binary is not None:      # checked now, used at the end: (path, type, options)
        check_options(resolve_type(binary_type, binary), **(binary_options or {}))
        binary = (binary, binary_type, dict(binary_options or {}))
    report = Report(progress, 5 if (arpa is not None or binary is not None) else 4)
    if client is not None:
        if text is None:
            raise ValueError("the Dask estimation counts text; give the text files")
        model = on_cluster(client, text, config, report, arpa, binary)
    else:
        with contextlib.ExitStack() as stack:
            model = run(text, config, report, arpa, binary, stack, counts)
    report.say(f"Name:nplm\tWall:{time.perf_counter() - t0:.3f} s")
    return model


def from_files(paths, folder, config):
    """Counts files as the runs of a spilled count."""
    paths = [paths] if isinstance(paths, (str, bytes)) or not hasattr(paths, "__iter__") else list(paths)
    vocabulary, runs = runs_from_files(paths, folder, config.order, config.skip_symbols)
    counts = counting.Counts(vocabulary, " ".join(map(str, paths)))
    counts.runs, counts.folder = runs, folder
    return counts


def run(text, config, report, arpa, binary, stack, counts_files=None):
    folder = None

    def make_folder():
        nonlocal folder
        if folder is None:
            folder = stack.enter_context(temp_folder(config.temp_dir, "nplm-estimate-"))
        return folder
    budget = max(config.memory - baseline_bytes(), 1 << 16)
    report.stage(1, "Counting and sorting n-grams")
    if counts_files is not None:
        counts = from_files(counts_files, make_folder(), config)
    else:
        counts = counting.count(text, config, report, budget if config.order > 1 else 1 << 62, make_folder)
    counter = counts.counter
    report_counts(counter, report, config)
    comments = header_comments(config, counts.name, counter.tokens)
    budget -= counter.vocab_bytes + PER_WORD_BYTES * counter.vocab_size
    if not counts.spilled and (config.order == 1 or in_memory_peak(counter) <= budget):
        model = in_memory(counter, config, report, comments)
        write_outputs(model, arpa, binary, report)
        return model
    return partitioned(counts, make_folder(), config, report, comments, max(budget, 1 << 16), arpa, binary)
