"""Choosing, on a validation text, how far a distilled table leans on its back-off input.

A table distilled from a mixture of a back-off model B and networks can be worse than
B itself on held-out text (PTB: a KN5 + default network mixture at 116.2 gave a table
of 149.7 where KN5 gives 141.2): the table lists few of the n-grams where the networks
help, and the teacher's probabilities on the listed ones leave the wrong mass to back
off with.  Moving the teacher towards B, p_F = (1 - F) p_T + F p_B, is exact for a
linear mixture (``InterpolatedModel.favour`` moves every weight row so), and at F = 1
the table's listed probabilities are B's own.  So once the table's n-grams are fixed,
every F costs only a score of the listed n-grams by B (once), the back-off weights,
and the validation perplexity of the table: ``choose_favour`` tries a few F and keeps
the best on the validation text.  Orders reshaped for backing off (continuation) are
not teacher scores and stay as they are.
"""
import os
import tempfile

import numpy as np

from nplm.backoff.binary import build_binary
from nplm.compose.ngram_structure import compute_backoffs
from nplm.evaluate import evaluate
from nplm.model import Model, quiet_config

GRID = (0.0, 0.25, 0.5, 1.0)


def mix_logprob(logprob, backoff_lp, F):
    """{n: log10((1 - F) 10^logprob + F 10^backoff_lp)} for the orders in
    ``backoff_lp``; the others copied as they are."""
    out = {n: lp.copy() for n, lp in logprob.items()}
    for n, b in backoff_lp.items():
        if F == 1.0:
            out[n] = b.copy()
        elif F > 0.0:
            out[n] = np.log10((1.0 - F) * np.power(10.0, logprob[n]) + F * np.power(10.0, b))
    return out


def valid_perplexity(tables, lines):
    """Perplexity of NGramTables on ``lines`` (through an nplm binary in a temporary
    directory, removed after)."""
    with tempfile.TemporaryDirectory(prefix="nplm-favour-") as d:
        path = os.path.join(d, "table.nplm")
        build_binary(tables, path)
        return evaluate(Model(path, quiet_config()), lines).perplexity


def choose_favour(s, logprob, backoff_lp, lines, predictable, make_tables, grid=GRID):
    """(F, logprob, bows, {F: perplexity}) for the F of ``grid`` whose table is best on
    ``lines``; ``make_tables(logprob, bows)`` builds a candidate's NGramTables."""
    tried = {}
    best = None
    for F in grid:
        lp = mix_logprob(logprob, backoff_lp, F)
        bows, _ = compute_backoffs(s, lp, predictable)
        tried[F] = valid_perplexity(make_tables(lp, bows), lines)
        if best is None or tried[F] < tried[best[0]]:
            best = (F, lp, bows)
    return best[0], best[1], best[2], tried
