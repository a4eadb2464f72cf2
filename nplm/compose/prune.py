"""SRILM's tools for back-off models on the distillation pipeline (nplm/compose/distil.py):
relative-entropy pruning (Stolcke 1998, ``ngram -prune``) and static linear
interpolation into one back-off model (``ngram -mix-lm ... -write-lm``).

Both list a back-off model's n-grams, give each the probability of a scorer, recompute
the back-off weights so that every context sums to one, and (pruning) remove the n-grams
whose removal changes the scorer's distribution least:

* ``prune``: the scorer is the model itself (its own probabilities, unchanged), or a
  ``reference`` (any model nplm loads: a network, a mixture), whose probabilities the
  kept n-grams then carry: the distillation teacher, whose relative entropy the
  criterion measures.  The criterion of an n-gram (h, w) is Stolcke's
  D = P(h) sum_v p(v | h) ln(p(v | h) / p'(v | h)), p' the model without (h, w) and
  with bow(h) recomputed, P(h) the chain-rule probability of h (P(<s>) = p(</s>), as
  SRILM).  A threshold prunes the n-grams with exp(D) - 1 (the relative perplexity
  increase, SRILM's -prune value) below it; a target size finds the threshold that
  keeps the most n-grams within it.  An n-gram that is the context or the lower-order
  n-gram of a kept one is kept.  Unigrams are never pruned.
* ``mix``: the scorer is the dynamic linear mixture sum_i l_i p_i(w | h) (each component
  backing off where it lacks the n-gram), the n-grams the union of the components':
  the table gives every n-gram it lists the mixture's probability, and backs off
  elsewhere.  Weights are given or tuned by EM on a text (nplm.compose.interpolate).
"""
import dataclasses

import numpy as np

from nplm.compose.distil import DistilConfig, load_model, run_pipeline, scored_structure
from nplm.compose.interpolate import InterpolatedModel, interpolate, is_spec, read_spec
from nplm.compose.ngram_structure import prune_scores
from nplm.evaluate import evaluate
from nplm.io.text import utf8_lines


@dataclasses.dataclass
class Pruned:
    """A pruned table, the threshold applied (relative perplexity increase) and the
    n-gram counts per order before and after."""
    tables: object
    threshold: float
    before: list
    after: list


def _check_words(tables, scorer, what):
    known = set(scorer.vocab.words())
    missing = [w for w in tables.vocab if w not in known]
    if missing:
        raise ValueError(f"the {what} lacks {len(missing)} of the model's words (e.g. {missing[0]!r}); "
                         "both must know the same words")


def prune(model, tables, *, threshold=None, target_size=None, reference=None, threads=1, progress=False):
    """Relative-entropy pruning of a back-off model (module docstring); a ``Pruned``.

    Parameters
    ----------
    model : Model or path
        The back-off model (ARPA, KenLM or nplm binary) that scores its n-grams.
    tables : NGramTables
        Its n-grams (``nplm.convert.backoff_tables``).
    threshold : float
        Prune the n-grams whose removal raises the perplexity by less than this
        fraction (SRILM's ``-prune``), or
    target_size : int
        keep at most this many n-grams of orders >= 2 (as many as a threshold can).
    reference : Model or path, optional
        The distribution the relative entropy is measured against; the kept n-grams
        get its probabilities.
    """
    if (threshold is None) == (target_size is None):
        raise ValueError("give a threshold or a target size")
    scorer = load_model(model if reference is None else reference)
    if reference is not None:
        _check_words(tables, scorer, "reference")
    cfg = DistilConfig(order=tables.order, ngrams=tables, prune_to=target_size, prune_threshold=threshold,
                       threads=threads, progress=progress)
    info = {}
    out = run_pipeline(scorer, cfg, info)
    out.comments = ["pruned by nplm"]
    return Pruned(out, info["prune_threshold"], list(tables.counts), list(out.counts))


def criteria(model, tables, reference=None):
    """Stolcke's criterion of every n-gram of orders >= 2 (before any is pruned):
    {n: (words, D)}, words a (count, n) object array of the n-grams' words, D their
    relative entropy change in nats (the perplexity grows by exp(D) - 1 of itself)."""
    scorer = load_model(model if reference is None else reference)
    cfg = DistilConfig(order=tables.order, ngrams=tables)
    t, s, logprob, _, p = scored_structure(scorer, cfg)
    D = prune_scores(s, logprob, p, t.bos, t.eos)
    words = np.array(t.words, dtype=object)
    return {n: (words[s.rows(n)], D[n]) for n in range(2, s.order + 1)}


def mixture(models, weights=None, unknown="split"):
    """The dynamic linear mixture of ``models`` (back-off model paths) and their paths:
    the weights given (default uniform), or those of ``models``, one path of a linear
    interpolation spec (nplm interpolate) of back-off models, when it is one."""
    models = list(models)
    if len(models) == 1 and is_spec(models[0]):
        spec = read_spec(models[0])
        if spec["mode"] != "linear" or spec.get("bucket_by") is not None or weights is not None:
            raise ValueError(f"{models[0]}: a static mixture takes a linear spec with one weight per "
                             "component (and no other weights)")
        models = [m if isinstance(m, str) else m["path"] for m in spec["models"]]
        weights, unknown = spec["weights"], spec.get("unknown", "split")
    return interpolate(models, weights, "linear", unknown=unknown), models


def mix(mix_model, tables, *, threads=1, progress=False):
    """NGramTables of the static mixture: the union of the components' n-grams
    (``tables``, one NGramTables per back-off component) with the dynamic mixture's
    probabilities (``mix_model``, a linear InterpolatedModel), back-off weights
    recomputed."""
    if not isinstance(mix_model, InterpolatedModel) or mix_model.mode != "linear" \
            or mix_model.bucket_by is not None:
        raise ValueError("a static mixture needs a linear mixture with one weight per component")
    order = max(t.order for t in tables)
    cfg = DistilConfig(order=order, ngrams=list(tables), threads=threads, progress=progress)
    out = run_pipeline(mix_model, cfg)
    out.comments = ["linear mixture written by nplm"]
    return out


def perplexity(model, text):
    """Perplexity (OOVs included, as KenLM's query) of ``model`` on a text file."""
    lines = (line.rstrip("\r\n") for line in utf8_lines(text))
    return evaluate(load_model(model), lines).perplexity


def counts_line(counts):
    """'1=V 2=... ' as the commands print n-gram counts."""
    return " ".join(f"{k + 1}={int(c)}" for k, c in enumerate(np.asarray(counts)))
