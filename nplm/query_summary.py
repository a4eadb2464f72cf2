"""What KenLM's query prints after the text: the corpus totals and their perplexities,
in KenLM's number format.  Plain Python (no numpy), for the query program's path over
KenLM binaries (nplm.cli.kenlm.query), whose start-up must stay short."""
import math


class CorpusStats:
    """Totals over a corpus, as in KenLM's query summary.  ``tokens`` counts one
    </s> per line when sentence context is on; log10 totals are float64 sums.
    (A plain class: dataclasses would add milliseconds to the query program's start.)"""
    __slots__ = ("log10_prob", "log10_prob_oov", "tokens", "oovs", "sentences")

    def __init__(self, log10_prob=0.0, log10_prob_oov=0.0, tokens=0, oovs=0, sentences=0):
        self.log10_prob, self.log10_prob_oov = log10_prob, log10_prob_oov
        self.tokens, self.oovs, self.sentences = tokens, oovs, sentences

    def __repr__(self):
        return "CorpusStats(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"

    def __eq__(self, other):
        return isinstance(other, CorpusStats) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

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
        return (f"Perplexity including OOVs:\t{kenlm_double(self.perplexity)}\n"
                f"Perplexity excluding OOVs:\t{kenlm_double(self.perplexity_excluding_oovs)}\n"
                f"OOVs:\t{self.oovs}\nTokens:\t{self.tokens}\n")


def kenlm_double(x):
    """``x`` as KenLM's query prints a double (double-conversion's shortest digits,
    util/float_to_string.cc): plain decimals for exponents -6 to 20, else ``1.5e-7``;
    ``NaN`` and ``inf`` (an empty text's perplexity is NaN there too)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    d, exp = _shortest_digits(abs(x))
    point = len(d) + exp            # the decimal point's place after d's first digit
    if -6 <= point - 1 < 21:
        if point <= 0:
            body = "0." + "0" * -point + d
        elif point >= len(d):
            body = d + "0" * (point - len(d))
        else:
            body = d[:point] + "." + d[point:]
    else:
        body = d[0] + ("." + d[1:] if len(d) > 1 else "") + f"e{point - 1}"
    return ("-" if math.copysign(1.0, x) < 0 else "") + body


def _shortest_digits(x):
    """(digits, exponent) of x >= 0 (finite) with x = int(digits) * 10**exponent, the
    shortest digits that read back as x (repr's), without leading or trailing zeros
    ("0" for zero)."""
    mantissa, _, exp = repr(x).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    kept = digits.rstrip("0")
    if not kept:
        return "0", 0
    return kept, int(exp or 0) - len(frac) + len(digits) - len(kept)
