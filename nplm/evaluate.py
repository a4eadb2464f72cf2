"""Corpus-level evaluation: what KenLM's ``query`` prints, for any model kind,
computed through the batched kernels (Python work is per batch, not per token)."""
import itertools
from typing import Callable, Iterable, Optional

import numpy as np

from nplm._kernels import segment_sums
from nplm.backoff._arpa import format_floats
from nplm.query_summary import CorpusStats, kenlm_double  # noqa: F401 (part of this module's API)


def kenlm_floats(values):
    """float32 values as KenLM's query prints them (shortest float32 digits, laid out
    as above): the ARPA writer's formatter, which lmplz's files check."""
    return format_floats(np.ascontiguousarray(values, dtype=np.float32))


def batches(lines, size=8192):
    """Lists of up to ``size`` lines (trailing newlines stripped)."""
    it = iter(lines)
    while True:
        chunk = [line.rstrip("\n") for line in itertools.islice(it, size)]
        if not chunk:
            return
        yield chunk


def evaluate(model, lines: Iterable[str], sentence_context: bool = True,
             per_line: Optional[Callable] = None, batch: int = 8192) -> CorpusStats:
    """Score every line of ``lines`` (an iterable of str) like KenLM's query.

    ``per_line``, if given, is called as per_line(line, probs, lengths, oovs, total) for
    each line with numpy arrays of its items (tokens, then </s>) and the line's total.
    The sums are query's (lm/ngram_query.hh): each line's float32 total, then those
    totals, and the OOV tokens' probabilities, added in order in float64; its
    perplexities show that many digits."""
    stats = CorpusStats()
    for chunk in batches(lines, batch):
        probs, lengths, oovs, offsets = model.full_scores_batch(chunk, sentence_context, sentence_context)
        totals = segment_sums(probs, np.asarray(offsets, dtype=np.int64))
        stats.log10_prob = _sum_in_order(stats.log10_prob, totals)
        stats.log10_prob_oov = _sum_in_order(stats.log10_prob_oov, probs[oovs])
        stats.tokens += int(len(probs))
        stats.oovs += int(oovs.sum())
        stats.sentences += len(chunk)
        if per_line is not None:
            for i, line in enumerate(chunk):
                a, b = offsets[i], offsets[i + 1]
                per_line(line, probs[a:b], lengths[a:b], oovs[a:b], totals[i])
    return stats


def _sum_in_order(start, values):
    """start + values[0] + values[1] + ... one by one in float64 (np.sum pairs them)."""
    return float(np.cumsum(np.concatenate(([start], np.asarray(values, dtype=np.float64))))[-1])
