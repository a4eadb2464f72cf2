"""The defaults of ``nplm distil``: the documented PTB recipe's lessons applied by
looking at the teacher, and the check that the table beats its back-off input.

What the recipe (README, "Distillation") learned, and what is chosen here from it:

* A network trained without ``--variable-history`` gives poor probabilities after
  short histories, and the table's orders below the top are all short histories:
  taking them from the mixture's back-off component (``--lower``) took a KN5 + default
  network table from 150.67 to 142.14.  So the lower orders come from the back-off
  component whenever a network of the mixture lacks variable history.
* A table lists only what its candidate pool holds; text sampled from the networks
  lists the unseen n-grams they find likely (20M -> 40M -> 80M sampled tokens:
  136.2 -> 134.8 -> 134.6).  The pool is drawn from the mixture's networks (the first
  twice the others' share), its size set by a memory budget and drawn in pieces while
  the run's projected end fits the time budget (``PoolClock``); sampled bigrams seen
  once and longer n-grams seen twice are listed.
* With a sampled pool the unigrams must be shaped for backing off (145.6 -> 136.2):
  ``continuation=1``, scoring whole distributions after the ``CONTINUATION_CONTEXTS``
  most probable one-word contexts (every one with ``quality="best"``).
* The table wants more of the back-off model than the perplexity-optimal mixture, and
  more where the back-off model has seen more of the context: a linear mixture's
  weights are re-tuned per back-off context bucket (3 back-off bins per context
  length) on the tuning text, then moved F = 0.25 towards the back-off model
  (131.09 -> 129.88).
* The target size is the back-off component's: "equal size" is what a user gets.

After writing, the table's perplexity on a validation text (given, or the text the
mixture was tuned on) is reported beside the back-off component's, with a warning
naming the options that help when the table is worse.
"""
import dataclasses
import json
import os
import re
import resource
import tempfile
import time
import warnings

import numpy as np

from nplm.backoff.kenlm import write as kenlm_write
from nplm.backoff.kenlm.reader import is_kenlm_binary
from nplm.compose.distil import (
    DistilConfig,
    load_model,
    refuse_overwriting_inputs,
    run_pipeline,
    teacher_log10,
    vocab_map,
    write_tables,
)
from nplm.compose.interpolate import InterpolatedModel, is_spec
from nplm.evaluate import evaluate
from nplm.io.resources import mem_available
from nplm.io.text import split_words, utf8_lines
from nplm.neural.query import network_of
from nplm.neural.sample import sample_to_file

QUALITIES = ("fast", "default", "best")
FAVOUR = 0.25                 # the recipe's move towards the back-off model
BUCKET_BINS = 3
BYTES_PER_SAMPLED_TOKEN = 60  # the recipe: 120M sampled tokens peaked at 6.9 GB
POOL_PER_TEXT_TOKEN = 135     # the recipe's 80M + 40M sampled for PTB's 887k training tokens
PROBE_TOKENS = 100_000        # sampled to measure the sampling rate
PROBE_CONTEXTS = 8            # whole teacher distributions scored to measure the scoring rate
# The time model of a pool drawn against a budget, measured on PTB (KN5 + a 1000-d
# network, 14.75M sampled tokens): counting, listing, scoring, pruning and the lean
# towards the back-off model took 0.46 of the sampling time; the rest of a run
# without a pool (the text's n-grams, the lean, writing, the check) about 25 teacher
# scores per training token; the continuation unigrams one per (context, word).
WORK_AFTER_SAMPLING = 0.5     # work per sampled token after sampling, in sampling times
ROWS_PER_TEXT_TOKEN = 25      # the rest of the run, in teacher scores per training token
RESERVE = 0.15                # of the time budget, for what the model misses
# The continuation unigrams score the teacher's whole distribution after this many
# of the most probable one-word contexts (PTB, 10k words: test 131.09 against 131.05
# with every context, in a third of the time; nplm/compose/continuation.py).
CONTINUATION_CONTEXTS = 2000
PRESETS = {
    # quality: (time budget s, memory bytes, continuation, buckets)
    "fast": (0, None, 0, True),
    "default": (20 * 60, 4 << 30, 1, True),
    "best": (None, None, 1, True),
}


class DistilQualityWarning(UserWarning):
    """The distilled table scores worse than its back-off input."""


def parse_duration(text):
    """Seconds of '20m', '90s', '1.5h' or a plain number of seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", str(text))
    if not m:
        raise ValueError(f"a time budget like 20m, 90s or 1.5h, not {text!r}")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def parse_size(text):
    """Bytes of '4G', '512M', '2.5g' or a plain number of bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT]?)[bB]?\s*", str(text))
    if not m:
        raise ValueError(f"a memory size like 4G or 512M, not {text!r}")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


@dataclasses.dataclass
class TeacherParts:
    """What the defaults need to know of a teacher: the mixture (or None), its back-off
    component (index, path, model, size in n-grams of orders >= 2), its networks
    (paths, and whether each was trained with variable history), its tuning text."""
    model: object
    mixture: object = None
    backoff_index: object = None
    backoff_path: object = None
    backoff: object = None
    backoff_size: object = None
    networks: list = dataclasses.field(default_factory=list)
    short_history: bool = False
    tuned_on: object = None


def _backoff_size(model):
    counts = getattr(getattr(model, "_data", None), "config", {}).get("counts") \
        if isinstance(getattr(getattr(model, "_data", None), "config", None), dict) else None
    return int(sum(counts[1:])) if counts else None


def _tuned_on(path):
    """The tuning text a spec file records (``nplm interpolate --tune``), if it exists."""
    if path is None or not is_spec(path):
        return None
    with open(path, encoding="utf-8") as f:
        text = json.load(f).get("tuned_on")
    return text if isinstance(text, str) and os.path.exists(text) else None


def inspect_teacher(teacher):
    """TeacherParts of a teacher (a path or a loaded model)."""
    model = load_model(teacher)
    path = os.fsdecode(teacher) if isinstance(teacher, (str, bytes, os.PathLike)) else None
    mixture = getattr(getattr(model, "_data", None), "mixture", None)
    if isinstance(model, InterpolatedModel):
        mixture = model
    parts = TeacherParts(model, mixture, tuned_on=_tuned_on(path))
    comps = mixture.components if mixture is not None else [model]
    paths = mixture.component_paths if mixture is not None else [path]
    for i, (comp, cpath) in enumerate(zip(comps, paths)):
        net = network_of(comp)
        if net is not None and cpath:
            parts.networks.append(cpath)
            parts.short_history |= not net.config.variable_history
        elif parts.backoff is None and _backoff_size(comp) is not None:
            parts.backoff_index, parts.backoff_path, parts.backoff = i, cpath, comp
            parts.backoff_size = _backoff_size(comp)
    return parts


def bucketed_teacher(parts, tune_text, favour=FAVOUR, bins=BUCKET_BINS):
    """A linear mixture's weights per back-off context bucket, tuned on ``tune_text``
    and moved ``favour`` towards the back-off component (the recipe's teacher); None
    where the teacher cannot have them (not a linear mixture of paths with an nplm
    back-off component: a KenLM binary's contexts carry no back-off weights the
    mixture's kernel can bin) or already has them."""
    mix = parts.mixture
    if mix is None or mix.mode != "linear" or mix.bucket_by is not None or parts.backoff_index is None \
            or tune_text is None or not all(mix.component_paths):
        return None
    if not isinstance(parts.backoff_path, str) or not os.path.exists(parts.backoff_path) \
            or is_kenlm_binary(parts.backoff_path):
        return None
    new = InterpolatedModel(mix.component_paths, mode="linear", unknown=mix.unknown,
                            bucket_by=parts.backoff_index, bucket_bins=bins)
    new.tune(tune_text)
    new.favour(parts.backoff_index, favour)
    return new


def sample_rate(network, tokens=PROBE_TOKENS):
    """Tokens per second sampling from ``network`` here and now (a short probe)."""
    with tempfile.TemporaryDirectory(prefix="nplm-distil-") as d:
        t0 = time.perf_counter()
        sample_to_file(network, os.path.join(d, "probe.txt"), tokens, seed=12345, progress=False)
        return tokens / max(time.perf_counter() - t0, 1e-3)


def score_seconds(model, contexts=PROBE_CONTEXTS):
    """Seconds per teacher score here and now: ``model``'s whole distribution after a
    few one-word contexts, as the continuation unigrams score it."""
    V = len(model.vocab)
    u = np.arange(min(V, 4), min(V, 4 + contexts), dtype=np.int32)
    rows = np.column_stack([np.repeat(u, V), np.tile(np.arange(V, dtype=np.int32), len(u))])
    t0 = time.perf_counter()
    teacher_log10(model, np.ascontiguousarray(rows, dtype=np.int32))
    return (time.perf_counter() - t0) / max(len(rows), 1)


def peak_rss():
    """This process's peak resident memory in bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def pool_tokens(memory, rss=0):
    """Sampled tokens that fit a memory budget (``None``: no limit) above ``rss`` bytes
    already resident."""
    if memory is None:
        return 1 << 62
    return int(max(0, memory - rss) / BYTES_PER_SAMPLED_TOKEN)


class PoolClock:
    """DistilConfig.sample_more for a time budget: another piece of the pool is drawn
    while the run's projected end, at the sampling rate measured so far (before the
    first piece: ``rate``), stays before ``end`` (a time.perf_counter() value): the
    piece, the work after sampling for every token drawn
    (``WORK_AFTER_SAMPLING``), and ``fixed_s`` seconds of work that does not grow
    with the pool.  ``drawn``: the tokens it let draw."""

    def __init__(self, end, rate, fixed_s):
        self.end, self.rate, self.fixed_s = end, rate, fixed_s
        self.drawn = 0

    def __call__(self, drawn, seconds, piece):
        rate = drawn / seconds if drawn and seconds > 0 else self.rate
        need = (piece + (drawn + piece) * WORK_AFTER_SAMPLING) / max(rate, 1e-9) + self.fixed_s
        go = time.perf_counter() + need <= self.end
        self.drawn = drawn + piece if go else drawn
        return go


# ---------------------------------------------------------------------------------
# The plan: the teacher to distil and the DistilConfig.

@dataclasses.dataclass
class Plan:
    """What ``plan`` chose: the teacher to distil (possibly a re-bucketed mixture),
    the DistilConfig, the inspected teacher, the validation text, and notes saying
    why (one line each)."""
    teacher: object
    config: DistilConfig
    parts: TeacherParts
    valid: object
    notes: list


def choose_lower(parts, lower):
    """The lower-order teacher: ``lower`` unless it is 'auto', which takes the
    back-off component when a network of the mixture lacks variable history."""
    if lower != "auto":
        return None if lower in (None, "none") else lower
    if parts.mixture is None or not parts.short_history or not parts.backoff_path:
        return None
    try:
        vocab_map(parts.model.vocab.words(), parts.backoff)
    except ValueError:
        return None                  # (it lacks words of the mixture: the teacher's own)
    return parts.backoff_path


def choose_teacher(parts, tune_text, buckets, notes):
    """The teacher to distil: the mixture re-tuned per back-off bucket where it can be."""
    if not buckets:
        return parts.model
    new = bucketed_teacher(parts, tune_text)
    if new is None:
        return parts.model
    notes.append(f"teacher: weights per back-off context bucket ({BUCKET_BINS} bins) tuned on "
                 f"{os.path.basename(tune_text)}, moved {FAVOUR} towards the back-off model")
    return new


def text_tokens(path):
    """Tokens of a text as distil counts them: its words plus one </s> per line."""
    return sum(len(split_words(line)) + 1 for line in utf8_lines(path))


def draws_pool(parts, quality, text):
    """Whether the run samples a pool: a network to sample, a training text whose size
    sets the pool's, and a quality above fast."""
    return bool(parts.networks) and quality != "fast" and text is not None


def choose_pool(parts, quality, text, budget_s, memory, t0, model, contexts):
    """(tokens, PoolClock or None) of the pool: at most the recipe's 135 sampled per
    training token, within the memory budget, drawn in pieces while the time budget
    allows (``contexts``: the one-word contexts the continuation unigrams score)."""
    if not draws_pool(parts, quality, text):
        return 0, None
    n_text = text_tokens(text)
    tokens = min(POOL_PER_TEXT_TOKEN * n_text, pool_tokens(memory, peak_rss()))
    if budget_s is None or tokens == 0:
        return tokens, None
    per_score = score_seconds(model)
    V = len(model.vocab)
    fixed = (min(contexts or V, V) * V + ROWS_PER_TEXT_TOKEN * n_text) * per_score
    clock = PoolClock(t0 + (1.0 - RESERVE) * budget_s, sample_rate(parts.networks[0]), fixed)
    return tokens, clock


def pool_note(parts, tokens, clock, budget_s, memory, drawn=True):
    """The line saying how big the pool is (``drawn``: after it was drawn) and why."""
    limits = [f"{budget_s / 60:g} min" if budget_s is not None else None,
              f"{memory / (1 << 30):.1f} GiB" if memory is not None else None]
    if clock is None:
        size = f"{tokens:,} tokens"
    else:
        size = f"{clock.drawn:,} of at most {tokens:,} tokens" if drawn else f"at most {tokens:,} tokens"
    return (f"pool: {size} sampled from {len(parts.networks)} network(s) (at most {POOL_PER_TEXT_TOKEN} per "
            f"training token; budget {', '.join(x for x in limits if x) or 'none'}"
            + (f"; drawn while the run's projected end fits {1 - RESERVE:.0%} of the time" if clock else "")
            + ")")


def plan(teacher, order, text=None, *, quality="default", valid=None, budget=None, memory=None,
         lower="auto", target_size="auto", continuation=None, buckets=None, sample_tokens=None,
         sample_min_count=None, favour=True, progress=False, **options):
    """The defaults for distilling ``teacher`` (see the module docstring); every
    explicit argument wins over them.  ``options`` go to DistilConfig as they are."""
    if quality not in QUALITIES:
        raise ValueError(f"quality {quality!r}: expected one of {', '.join(QUALITIES)}")
    t0 = time.perf_counter()
    preset_budget, preset_memory, preset_cont, preset_buckets = PRESETS[quality]
    budget_s = parse_duration(budget) if budget is not None else preset_budget or None
    memory = parse_size(memory) if memory is not None else preset_memory
    if quality == "best" and memory is None:
        avail = mem_available()
        memory = int(0.8 * avail) if avail else None
    if options.get("count_memory") is None and memory is not None:
        options["count_memory"] = memory         # counting stays within the run's budget
    parts = inspect_teacher(teacher)
    notes = []
    tune_text = valid or parts.tuned_on
    model = choose_teacher(parts, tune_text, preset_buckets if buckets is None else buckets, notes)
    lower_teacher = choose_lower(parts, lower)
    if lower == "auto" and lower_teacher is not None:
        notes.append(f"lower orders from {os.path.basename(lower_teacher)} (a network lacks variable history)")
    if quality != "best":
        options.setdefault("continuation_contexts", CONTINUATION_CONTEXTS)
    clock = None
    if sample_tokens is None and order > 1:
        sample_tokens, clock = choose_pool(parts, quality, text, budget_s, memory, t0, model,
                                           options.get("continuation_contexts"))
        if draws_pool(parts, quality, text):
            notes.append(pool_note(parts, sample_tokens, clock, budget_s, memory, drawn=False))
    sample_tokens = sample_tokens or 0
    if target_size == "auto":
        target_size = parts.backoff_size
        if target_size is not None:
            notes.append(f"target size: {target_size:,} n-grams (the back-off component's)")
    if continuation is None:
        continuation = min(preset_cont, order - 1) if sample_tokens or options.get("sample_text") else 0
    lean = favour and parts.mixture is not None and parts.backoff_path is not None and tune_text is not None
    if lean:
        notes.append(f"the teacher's lean towards {os.path.basename(parts.backoff_path)} chosen on "
                     f"{os.path.basename(tune_text)}")
    cfg = DistilConfig(order=order, text=text, lower_teacher=lower_teacher, prune_to=target_size,
                       favour_model=parts.backoff_path if lean else None, favour_valid=tune_text if lean else None,
                       continuation=continuation, sample_tokens=sample_tokens,
                       sample_models=tuple(parts.networks) if sample_tokens else (), sample_more=clock,
                       sample_min_count=sample_min_count if sample_min_count is not None
                       else ([1, 2][:order - 1] if sample_tokens else None), progress=progress, **options)
    return Plan(model, cfg, parts, valid or parts.tuned_on, notes)


# ---------------------------------------------------------------------------------
# The check after writing.

# A table within 2% of its back-off input, taught by a network without variable history,
# gets the warning that names the cause.
SMALL_GAIN = 0.98


@dataclasses.dataclass
class QualityReport:
    """Perplexity of the table and of its back-off input on a validation text."""
    valid: str
    tokens: int
    table: float
    backoff: object = None
    backoff_name: object = None

    @property
    def worse(self):
        return self.backoff is not None and self.table > self.backoff

    def line(self):
        s = f"validation perplexity ({os.path.basename(self.valid)}, {self.tokens} tokens): table {self.table:.2f}"
        if self.backoff is not None:
            s += f", back-off input {self.backoff_name} {self.backoff:.2f} ({self.table / self.backoff - 1:+.1%})"
        return s


def advice(plan_):
    """Options that make a table better, for the warning."""
    cfg, parts = plan_.config, plan_.parts
    tips = []
    if cfg.prune_to is not None and parts.backoff_size and cfg.prune_to < parts.backoff_size:
        tips.append(f"--target-size {parts.backoff_size} (the back-off model's size)")
    if parts.backoff_path and cfg.lower_teacher is None and parts.mixture is not None:
        tips.append(f"--lower {parts.backoff_path} (orders below the top from the back-off model)")
    if parts.networks and not cfg.sample_tokens and cfg.sample_text is None:
        tips.append("--quality default or best (a pool of text sampled from the networks)")
    elif parts.networks:
        tips.append("--quality best, or a larger --budget / --memory (a bigger sampled pool)")
    if cfg.sample_tokens and not cfg.continuation:
        tips.append("--continuation (unigrams shaped for backing off)")
    if parts.mixture is not None and plan_.teacher is parts.model and parts.mixture.bucket_by is None:
        tips.append("--valid DEV (the mixture's weights re-tuned per back-off context bucket)")
    if parts.short_history:
        tips.append("networks trained with variable history (nplm train without --no-variable-history)")
    return tips


def check_table(out, plan_, valid=None):
    """QualityReport of the written table ``out`` on ``valid`` (default: the plan's
    validation text); None without one."""
    valid = valid or plan_.valid
    if valid is None or out == "-":
        return None
    with open(valid, encoding="utf-8") as f:
        lines = f.read().splitlines()
    table = evaluate(load_model(out), lines)
    rep = QualityReport(valid, table.tokens, table.perplexity)
    if plan_.parts.backoff is not None:
        rep.backoff = evaluate(plan_.parts.backoff, lines).perplexity
        rep.backoff_name = os.path.basename(plan_.parts.backoff_path or "model")
    if rep.worse:
        warnings.warn(f"the distilled table is WORSE than its back-off input on {os.path.basename(valid)}: "
                      f"{rep.table:.2f} against {rep.backoff:.2f}; try " + "; ".join(advice(plan_) or
                                                                                    ["a larger target size"]),
                      DistilQualityWarning, stacklevel=3)
    elif plan_.parts.short_history and rep.backoff is not None and rep.table > SMALL_GAIN * rep.backoff:
        warnings.warn(f"the distilled table gains only {1 - rep.table / rep.backoff:.1%} over its back-off input "
                      f"on {os.path.basename(valid)} ({rep.table:.2f} against {rep.backoff:.2f}): the teacher's "
                      "network was trained with --no-variable-history, so the orders below the top keep the "
                      "back-off model's probabilities; a network trained with variable history (nplm train's "
                      "default) teaches every order (on PTB, 7% better than KN5 instead of 0.3%)",
                      DistilQualityWarning, stacklevel=3)
    return rep


def distil_auto_to_file(teacher, out, order, text=None, log=None, binary=None, **kwargs):
    """Plan (``plan``), distil, write ``out`` and check it on the validation text;
    returns (NGramTables, QualityReport or None, Plan).  ``log(line)`` gets the notes.
    ``binary``: {"type": "probing" | "trie" | "nplm", build_binary's bit options}
    writes that binary instead of the ARPA (or nplm binary) ``out``'s name asks for."""
    if binary is not None:     # (bad bits fail before the work)
        kenlm_write.check_options(binary["type"], **{k: v for k, v in binary.items() if k != "type"})
    p = plan(teacher, order, text, **kwargs)
    for note in p.notes if log is not None else ():
        log(note)
    refuse_overwriting_inputs(out, [teacher, *p.config.inputs()])
    info = {}
    tables = run_pipeline(p.teacher, p.config, info)
    clock = p.config.sample_more
    if isinstance(clock, PoolClock):
        p.notes.append(f"pool: {clock.drawn:,} tokens drawn within the time budget")
        if log is not None:
            log(p.notes[-1])
    if "favour" in info:
        p.notes.append(f"moved {info['favour']:g} of the way towards the back-off model (validation perplexity "
                       + ", ".join(f"{F:g}: {v:.2f}" for F, v in info["favour_tried"].items()) + ")")
        if log is not None:
            log(p.notes[-1])
    write_tables(tables, out, progress=p.config.progress, binary=binary)
    return tables, check_table(out, p), p
