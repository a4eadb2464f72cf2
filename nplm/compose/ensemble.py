"""Ensembles: several networks (typically the same architecture trained from other
seeds) combined linearly, p(w | h) = sum_i l_i p_i(w | h), with the weights tuned by
EM on a validation text.  An ensemble is a linear interpolation
(``nplm.compose.interpolate``) and is saved as its JSON spec, so ``nplm.Model``
loads it with the kenlm API like any other model; the spec records that it is an
ensemble and the validation perplexity of each member and of the mixture.
"""
import dataclasses
import os

from nplm.compose.interpolate import interpolate
from nplm.io.text import split_words, utf8_lines
from nplm.model import Model, quiet_config
from nplm.neural.train import train


def member_perplexity(model, sentences):
    """Perplexity of ``model`` on ``sentences`` (sentence start and end on)."""
    totals = model.score_sentences(sentences)
    tokens = sum(len(split_words(s)) + 1 for s in sentences)
    return float(10.0 ** (-float(totals.sum()) / tokens))


def ensemble(models, dev=None, weights=None, out=None, normalization=None, **tune_options):
    """The linear ensemble of ``models`` (paths or nplm models; each must give
    normalised probabilities: a neural network in an exact mode, the default).

    With ``dev`` (a path or a list of sentences) the weights are tuned by EM on it;
    otherwise ``weights`` (default uniform) are used as given.  With ``out`` the spec
    is written there.  Returns (model, report): report holds each member's and the
    ensemble's dev perplexity when tuned (else None)."""
    cfg = quiet_config()
    members = [Model(m, cfg, normalization=normalization) if isinstance(m, (str, bytes, os.PathLike))
               else m for m in models]
    if len(members) < 2:
        raise ValueError(f"an ensemble needs at least two models, not {len(members)}")
    mix = interpolate(members, weights, mode="linear", config=cfg)
    report = None
    if dev is not None:
        result = mix.tune(dev, **tune_options)
        sentences = _sentences(dev)
        report = {"members_dev_perplexity": [member_perplexity(m, sentences) for m in members],
                  "dev_perplexity": result.perplexity, "dev_tokens": result.tokens,
                  "weights": [float(w) for w in result.weights]}
        if isinstance(dev, (str, os.PathLike)):
            report["tuned_on"] = os.path.abspath(dev)
    if out is not None:
        mix.save(out, ensemble=True, **(report or {}))
    return mix, report


def _sentences(dev):
    """The non-blank lines of ``dev`` (a path, UTF-8, plain or compressed, or a list)."""
    if isinstance(dev, (str, bytes, os.PathLike)):
        return [line.rstrip("\n") for line in utf8_lines(os.fsdecode(dev)) if split_words(line)]
    return [s.decode("utf-8") if isinstance(s, bytes) else s for s in dev]


def member_paths(out, k):
    """Where ``train_ensemble`` writes member i of the ensemble ``out``: OUT.m{i}.nplm
    (beside the spec, without its .json)."""
    stem = os.fspath(out)
    if stem.endswith(".json"):
        stem = stem[:-len(".json")]
    return [f"{stem}.m{i}.nplm" for i in range(k)]


def train_ensemble(train_path, valid_path, out, k, config=None, tconfig=None, resume=False,
                   log=print, progress=True):
    """Train ``k`` networks that differ only by seed (tconfig.seed, + 1, ...), each
    saved as :func:`member_paths`, and write their ensemble, tuned on
    ``valid_path``, to ``out``.  ``resume`` goes on from each member's checkpoint
    (members already finished are kept).  Returns (model, report) as ``ensemble``."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 2:
        raise ValueError(f"an ensemble needs at least two networks, not {k!r}")
    if valid_path is None:
        raise ValueError("an ensemble's weights are tuned on the validation text: give one")
    paths = member_paths(out, k)
    base_seed = tconfig.seed if tconfig is not None else None
    for i, path in enumerate(paths):
        if resume and os.path.exists(path) and not os.path.exists(path + ".ckpt"):
            log(f"member {i + 1}/{k}: {path} is finished")
            continue
        tc = tconfig if tconfig is None else dataclasses.replace(tconfig, seed=base_seed + i)
        log(f"member {i + 1}/{k}: seed {tc.seed if tc is not None else 'default'} -> {path}")
        train(train_path, valid_path, path, config, tc,
              resume=resume and os.path.exists(path + ".ckpt"), log=log, progress=progress)
    return ensemble(paths, dev=valid_path, out=out)
