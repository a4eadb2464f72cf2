"""Corpus-level evaluation: what KenLM's ``query`` prints, for any model kind,
computed through the batched kernels (Python work is per batch, not per token)."""
import itertools
from dataclasses import dataclass

import numpy as np


@dataclass
class CorpusStats:
    """Totals over a corpus, as in KenLM's query summary.  ``tokens`` counts one
    </s> per line when sentence context is on; log10 totals are float64 sums."""
    log10_prob: float = 0.0
    log10_prob_oov: float = 0.0
    tokens: int = 0
    oovs: int = 0
    sentences: int = 0

    @property
    def perplexity(self):
        """Perplexity including OOVs: 10 ** (-total / tokens)."""
        return 10.0 ** (-self.log10_prob / self.tokens) if self.tokens else float("nan")

    @property
    def perplexity_excluding_oovs(self):
        """Perplexity with OOV tokens dropped from both sums (KenLM's second line)."""
        n = self.tokens - self.oovs
        return 10.0 ** (-(self.log10_prob - self.log10_prob_oov) / n) if n else float("nan")

    def summary(self):
        return (f"Perplexity including OOVs:\t{self.perplexity:.10g}\n"
                f"Perplexity excluding OOVs:\t{self.perplexity_excluding_oovs:.10g}\n"
                f"OOVs:\t{self.oovs}\nTokens:\t{self.tokens}\n")


def batches(lines, size=8192):
    """Lists of up to ``size`` lines (trailing newlines stripped)."""
    it = iter(lines)
    while True:
        chunk = [line.rstrip("\n") for line in itertools.islice(it, size)]
        if not chunk:
            return
        yield chunk


def evaluate(model, lines, sentence_context=True, per_line=None, batch=8192):
    """Score every line of ``lines`` (an iterable of str) like KenLM's query.

    ``per_line``, if given, is called as per_line(line, probs, lengths, oovs) for
    each line with numpy arrays of its items (tokens, then </s>)."""
    stats = CorpusStats()
    for chunk in batches(lines, batch):
        probs, lengths, oovs, offsets = model.full_scores_batch(chunk, sentence_context, sentence_context)
        p64 = probs.astype(np.float64)
        stats.log10_prob += float(p64.sum())
        stats.log10_prob_oov += float(p64[oovs].sum())
        stats.tokens += int(len(probs))
        stats.oovs += int(oovs.sum())
        stats.sentences += len(chunk)
        if per_line is not None:
            for i, line in enumerate(chunk):
                a, b = offsets[i], offsets[i + 1]
                per_line(line, probs[a:b], lengths[a:b], oovs[a:b])
    return stats
