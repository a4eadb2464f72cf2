"""query over any model nplm.Model loads (ARPA files, nplm binaries, neural models):
KenLM's QueryPrinter through the batched scoring kernels.  KenLM binaries take
nplm.backoff.kenlm._query_text instead (see query.py)."""
import sys

import numpy as np

from nplm._kernels import segment_sums
from nplm.evaluate import CorpusStats, kenlm_floats
from nplm.io.text import split_words, word_str
from nplm.model import Model, quiet_config

BATCH = 8192


def run(path, load, levels, context, flush):
    """Score standard input with the model at ``path`` (loaded by ``load``, a LoadMethod value),
    printing as query prints; the CorpusStats."""
    model = Model(path, quiet_config(load))
    printer = Printer(model, levels, context, flush)
    return score(model, printer, sys.stdin.buffer, context)


class Printer:
    """KenLM's QueryPrinter: word items, Total lines and the summary, as bytes."""

    def __init__(self, model, levels, context, flush):
        self.out = sys.stdout.buffer
        self.vocab = model.vocab
        self.eos = self.vocab.id("</s>")
        self.words, self.lines = "word" in levels, "sentence" in levels
        self.summary = "summary" in levels
        self.context, self.flush = context, flush

    def line(self, words, probs, lengths, oovs, total, finished):
        parts = []
        if self.words:
            shown = kenlm_floats(probs)
            ids = [self.vocab.id(w) for w in words]
            parts = [b"%s=%d %d %s\t" % (w.encode("utf-8", "surrogateescape"), i, n, p.encode())
                     for w, i, n, p in zip(words, ids, lengths, shown)]
            if finished and self.context:
                parts.append(b"</s>=%d %d %s\t" % (self.eos, lengths[-1], shown[-1].encode()))
        if finished and self.lines:
            parts.append(b"Total: %s OOV: %d\n" % (kenlm_floats([total])[0].encode(), int(oovs.sum())))
        if parts:
            self.out.write(b"".join(parts))
            if self.flush:
                self.out.flush()


def score(model, printer, stdin, context):
    """Score stdin line by line in batches; the corpus totals KenLM's way."""
    stats, oov_only = CorpusStats(), []
    pending = []
    for raw in stdin:
        pending.append(raw)
        if len(pending) == BATCH:
            _batch(model, printer, pending, context, stats, oov_only)
            pending = []
    _batch(model, printer, pending, context, stats, oov_only)
    stats.log10_prob_oov = float(np.cumsum(np.concatenate(([0.0], np.asarray(oov_only, dtype=np.float64))))[-1])
    return stats


def _batch(model, printer, raws, context, stats, oov_only):
    if not raws:
        return
    last_open = not raws[-1].endswith(b"\n")
    done = raws[:-1] if last_open else raws
    lines = [word_str(r.rstrip(b"\n")) for r in done]
    if lines:
        probs, lengths, oovs, offsets = model.full_scores_batch(lines, context, context)
        totals = segment_sums(probs, np.asarray(offsets, dtype=np.int64))
        for i, line in enumerate(lines):
            a, b = offsets[i], offsets[i + 1]
            printer.line(split_words(line), probs[a:b], lengths[a:b], oovs[a:b], totals[i], True)
        stats.log10_prob = float(np.cumsum(np.concatenate(([stats.log10_prob], totals.astype(np.float64))))[-1])
        stats.tokens += int(len(probs))
        stats.oovs += int(oovs.sum())
        oov_only.extend(probs[oovs].tolist())
    if last_open:
        # KenLM's "no newline after the last query": words only, no </s>, no Total;
        # its tokens count, its OOVs' probabilities too, its total does not
        line = word_str(raws[-1])
        probs, lengths, oovs, _ = model.full_scores_batch([line], context, False)
        printer.line(split_words(line), probs, lengths, oovs, 0.0, False)
        stats.tokens += int(len(probs))
        oov_only.extend(probs[oovs].tolist())
