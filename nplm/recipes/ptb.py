"""End-to-end reproduction on PTB: every model kind nplm offers, side by side with the
published figures, in one readable report (``nplm reproduce`` / tools/reproduce.py).

The pipeline is a list of stages, each a function of one ``Run``; every stage is
timed, and one that fails (its module missing, broken, or a model it needs absent)
is recorded as "not available: <reason>" in the report instead of stopping the run,
so the report always says what does and does not work today.

Stages:  data (PTB with ``<unk>`` written ``UNK``, as the lmplz references) ->
KN1/KN3/KN5 (``nplm.estimate``) -> neural models (``nplm.train``: Vaswani et al.
2013 NCE, Baltescu & Blunsom 2015 class-factored NCE with diagonal contexts, a
variable-history NNLM with fallback normaliser tables) scored in every normalisation
mode -> KN5 + neural interpolation (linear and log-linear, tuned on valid) ->
distillation into ARPA -> float16/int8 quantisation -> report.md, results.json,
plots (matplotlib, optional).

Each model row holds: test perplexity (KenLM query's, OOVs included, one </s> per
line), size on disk, training time, the per-token latency of the kenlm-style
``full_scores`` loop, and the throughput of the batched ``full_scores_batch`` path.
``--quick`` runs the same pipeline on a small subset with small networks, so CI can
run it end to end in a few minutes; its figures say nothing about model quality.
"""
import dataclasses
import json
import math
import os
import platform
import sys
import time
import traceback

from nplm import build_binary
from nplm.backoff.kneser_ney import estimate
from nplm.compose.distil import distil_to_file
from nplm.compose.interpolate import interpolate
from nplm.convert import convert
from nplm.evaluate import evaluate
from nplm.io import container
from nplm.io.atomic import atomic_write
from nplm.io.files import open_text
from nplm.io.text import split_words
from nplm.model import Model, quiet_config
from nplm.neural.network import NeuralConfig
from nplm.neural.query import precompute
from nplm.neural.train import TrainConfig, train

# Published PTB test perplexities (10k vocabulary).  KN5: Mikolov et al. 2011, as
# quoted by Baltescu & Blunsom 2015 (lmplz gives 141.19 here, see ../shared/reference);
# feed-forward NNLM and its interpolation with KN5: Mikolov et al. 2011 ("Empirical
# evaluation and combination of advanced language modeling techniques").
PUBLISHED = {"KN5": 141.2, "NNLM": 140.2, "NNLM+KN5": 116.7}


@dataclasses.dataclass
class Settings:
    """What a run does; ``quick()`` and ``full()`` are the two presets."""
    train_lines: int = 0            # 0: all
    valid_lines: int = 0
    test_lines: int = 0
    order: int = 5
    neural_minutes: float = 8.0     # per neural model: training stops after the epoch that passes it
    epochs: int = 20
    scale: float = 1.0              # multiplies the papers' layer sizes
    noise_samples: int = 100
    latency_sentences: int = 400    # sentences timed through the per-token full_scores loop
    distil_order: int = 5
    eval_seconds: float = 300.0     # per text and model: a slower model is scored on a prefix of the text
    tune_contexts: int = 3000       # log-linear tuning: most valid contexts (sampled)
    reuse: bool = False             # keep neural models already in OUT/models trained with the same config
    threads: int = 2
    quick: bool = False

    @classmethod
    def quick_preset(cls):
        return cls(train_lines=1500, valid_lines=120, test_lines=120, neural_minutes=0.5, epochs=2,
                   scale=0.1, noise_samples=10, latency_sentences=40, eval_seconds=20.0, tune_contexts=0, distil_order=3,
                   quick=True)

    @classmethod
    def full_preset(cls):
        return cls()


@dataclasses.dataclass
class Row:
    """One model's figures (None: not measured)."""
    model: str
    family: str                       # "back-off", "neural", "interpolated", "distilled", "quantised"
    normalization: str = ""
    test_ppl: float = None
    valid_ppl: float = None
    oovs: int = None
    tokens: int = None
    size_bytes: int = None
    train_s: float = None
    us_per_token: float = None
    tokens_per_s: float = None
    test_sentences: int = None        # sentences of the test text scored
    partial: bool = False             # True: only a (time-boxed) prefix of the test text was scored
    published: float = None
    note: str = ""


@dataclasses.dataclass
class Stage:
    name: str
    status: str = "ok"                # "ok" or "not available: <reason>"
    seconds: float = 0.0
    detail: str = ""


class Run:
    """State shared by the stages: paths, settings, the rows and stage records."""

    def __init__(self, data, out, settings, log=None, command=None):
        self.command = command or f"nplm.reproduce({data!r}, {out!r})"
        self.data = os.path.abspath(data)
        self.out = os.path.abspath(out)
        self.s = settings
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.rows = []
        self.stages = []
        self.models = {}      # label -> {"path", "normalization", "train_s", "history"}
        self.text = {}        # "train"/"valid"/"test" -> path of the prepared text
        self.models_dir = os.path.join(self.out, "models")
        self.reused_s = 0.0   # training time of models reused from an earlier run

    def stage(self, name, fn, *args):
        """Run ``fn(self, *args)``, timed; a failure becomes a "not available" record."""
        rec = Stage(name)
        self.log(f"== {name}")
        t0 = time.perf_counter()
        try:
            rec.detail = fn(self, *args) or ""
        except Exception as e:    # the report names what failed and why, then the run goes on
            reason = f"{type(e).__name__}: {e}".strip().splitlines()[0][:300]
            rec.status = f"not available: {reason}"
            self.log(f"   {rec.status}")
            self.log("".join(traceback.format_exception(e))[-2000:])
        rec.seconds = time.perf_counter() - t0
        self.stages.append(rec)
        return rec.status == "ok"

    def add(self, row):
        self.rows.append(row)
        ppl = "n/a" if row.test_ppl is None else f"{row.test_ppl:.2f}"
        self.log(f"   {row.model} [{row.normalization or '-'}]: test ppl {ppl}")
        return row

    def need(self, label):
        if label not in self.models:
            raise RuntimeError(f"{label} was not built (see its stage)")
        return self.models[label]


# --------------------------------------------------------------------------- helpers


def _open_model(path, normalization=None):
    return Model(path, quiet_config(), normalization=normalization)


def _read_lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def best_time(fn, setup, budget=1.0, most=5):
    """(result, seconds): the fastest of repeated ``fn(setup())`` calls (``setup`` is
    not timed: it gives each call a freshly loaded model, so no call profits from the
    caches an earlier one filled), repeating while the calls so far took under
    ``budget`` seconds (cheap timings are noisy on a shared machine)."""
    best, spent, k = math.inf, 0.0, 0
    while k < most and (k == 0 or spent < budget):
        obj = setup()
        t0 = time.perf_counter()
        result = fn(obj)
        dt = time.perf_counter() - t0
        best, spent, k = min(best, dt), spent + dt, k + 1
    return result, best


def _full_scores_loop(model, lines):
    n = 0
    for line in lines:
        for _ in model.full_scores(line):
            n += 1
    return n


def _evaluate_boxed(opener, lines, budget):
    """(CorpusStats, seconds, lines scored, seconds per line): the whole text, or, when
    a probe (its last lines) says scoring it all would take over ``budget`` seconds, the
    prefix that fits."""
    probe = lines[-max(20, len(lines) // 50):]
    t0 = time.perf_counter()
    evaluate(opener(), probe)
    per_line = (time.perf_counter() - t0) / max(1, len(probe))
    if per_line * len(lines) > budget:
        lines = lines[:max(5, int(budget / per_line))]
    stats, dt = best_time(lambda m: evaluate(m, lines), opener)
    return stats, dt, len(lines), per_line


def measure(run, opener, row, valid=True):
    """Fill ``row`` with perplexities and speeds of the model ``opener()`` loads."""
    test = _read_lines(run.text["test"])
    stats, dt, n_lines, per_line = _evaluate_boxed(opener, test, run.s.eval_seconds)
    row.test_ppl, row.oovs, row.tokens, row.test_sentences = stats.perplexity, stats.oovs, stats.tokens, n_lines
    row.tokens_per_s = stats.tokens / dt if dt > 0 else None
    if n_lines < len(test):
        row.partial = True
        row.note = (row.note + "; " if row.note else "") + \
            (f"test ppl over the first {n_lines} of {len(test)} sentences only ({stats.tokens:,} tokens; "
             f"the whole text would take {per_line * len(test) / 60:.0f} min)")
    # The kenlm-style per-sentence loop: what a decoder calling the API pays per token.
    n_lat = min(run.s.latency_sentences, max(5, int(0.2 * run.s.eval_seconds / max(per_line, 1e-9))))
    sample = test[:n_lat]
    n, dt = best_time(lambda m: _full_scores_loop(m, sample), opener)
    row.us_per_token = dt / n * 1e6 if n else None
    if valid:
        lines = _read_lines(run.text["valid"])
        vstats, _, v_lines, _ = _evaluate_boxed(opener, lines, run.s.eval_seconds)
        row.valid_ppl = vstats.perplexity
        if v_lines < len(lines):
            row.note = (row.note + "; " if row.note else "") + f"valid ppl over the first {v_lines} sentences"
    return row


def _size(*paths):
    return sum(os.path.getsize(p) for p in paths)


# --------------------------------------------------------------------------- stages


def stage_data(run):
    """PTB train/valid/test with ``<unk>`` written ``UNK`` (as in the lmplz references),
    cut to the settings' line counts."""
    os.makedirs(os.path.join(run.out, "data"), exist_ok=True)
    os.makedirs(run.models_dir, exist_ok=True)
    limits = {"train": run.s.train_lines, "valid": run.s.valid_lines, "test": run.s.test_lines}
    counts = []
    for part, limit in limits.items():
        src = os.path.join(run.data, f"ptb.{part}.txt")
        if not os.path.exists(src):
            raise FileNotFoundError(2, "PTB file missing", src)
        dst = os.path.join(run.out, "data", f"{part}.txt")
        n = tokens = 0
        with open_text(src) as f, atomic_write(dst, "w") as g:
            for line in f:
                if limit and n >= limit:
                    break
                words = split_words(line)
                if not words:
                    continue
                g.write(" ".join("UNK" if w == "<unk>" else w for w in words) + "\n")
                n += 1
                tokens += len(words)
        run.text[part] = dst
        counts.append(f"{part} {n:,} lines / {tokens:,} words")
    return "; ".join(counts)


def stage_kneser_ney(run, order):
    """Modified Kneser-Ney of ``order`` (lmplz-identical), as ARPA and nplm binary."""
    label = f"KN{order}"
    arpa = os.path.join(run.models_dir, f"kn{order}.arpa")
    binary = os.path.join(run.models_dir, f"kn{order}.nplm")
    t0 = time.perf_counter()
    # PTB's preprocessing leaves almost no singletons, so the unigram counts-of-counts
    # give no valid discounts: order 1 uses lmplz's --discount_fallback values.
    estimate(run.text["train"], order, arpa=arpa, binary=binary, progress=False,
             discount_fallback=True if order == 1 else None)
    train_s = time.perf_counter() - t0
    run.models[label] = {"path": binary, "normalization": None, "train_s": train_s}
    row = Row(label if order > 1 else "unigram (KN1)", "back-off", train_s=train_s,
              size_bytes=_size(binary), published=PUBLISHED.get(label),
              note=f"ARPA {_size(arpa) / 2**20:.1f} MiB" + ("; lmplz's fallback discounts" if order == 1 else ""))
    run.add(measure(run, lambda: _open_model(binary), row))
    return f"estimated in {train_s:.1f} s"


def stage_kenlm_reference(run):
    """The real kenlm module on the same KN5 ARPA: the speed reference (kenlm has no
    batch API, so its throughput column is the per-sentence ``score()`` loop)."""
    import kenlm
    kn = run.need(f"KN{run.s.order}")
    arpa = kn["path"][:-len(".nplm")] + ".arpa"
    cfg = kenlm.Config()
    cfg.show_progress = False
    cfg.arpa_complain = kenlm.ARPALoadComplain.NONE
    t0 = time.perf_counter()
    m = kenlm.Model(arpa, cfg)
    load_s = time.perf_counter() - t0
    nplm_row = [r for r in run.rows if r.model == f"KN{run.s.order}"][0]
    row = Row(f"KN{run.s.order} via kenlm module", "reference", size_bytes=_size(arpa),
              note=f"speed reference; loads the ARPA in {load_s:.1f} s; tokens/s = score() loop")
    for part in ("test", "valid"):
        lines = _read_lines(run.text[part])
        total, dt = best_time(lambda m: sum(m.score(line) for line in lines), lambda: m)  # noqa: B023 - timed within this iteration
        n = sum(len(split_words(line)) + 1 for line in lines)
        if part == "test":
            row.test_ppl, row.tokens, row.tokens_per_s = 10 ** (-total / n), n, n / dt
        else:
            row.valid_ppl = 10 ** (-total / n)
    sample = _read_lines(run.text["test"])[:run.s.latency_sentences]
    n, dt = best_time(lambda m: _full_scores_loop(m, sample), lambda: m)
    row.us_per_token = dt / n * 1e6
    run.add(row)
    return (f"kenlm test ppl {row.test_ppl:.3f} vs nplm {nplm_row.test_ppl:.3f}; nplm/kenlm speed: "
            f"per-token loop x{row.us_per_token / nplm_row.us_per_token:.2f}, "
            f"batch vs score() loop x{nplm_row.tokens_per_s / row.tokens_per_s:.2f}")


def neural_configs(s):
    """The three neural configurations (Vaswani et al.'s NCE network, Baltescu & Blunsom's
    class NCE network, a variable-history network), at ``s.scale``."""

    def dim(x):
        return max(8, int(round(x * s.scale)))
    return {
        # Vaswani et al. 2013: two hidden layers, full softmax trained by NCE (k = 100),
        # self-normalised at query time.
        "Vaswani NCE": NeuralConfig(order=s.order, embedding_dim=dim(150), hidden=(dim(750), dim(150)),
                                    context="full", output="softmax", objective="nce",
                                    noise_samples=s.noise_samples, variable_history=False,
                                    clustering="brown"),
        # Baltescu & Blunsom 2015: diagonal context matrices, no hidden layer,
        # Brown-class-factored output, NCE with few noise samples.
        "Baltescu class NCE": NeuralConfig(order=s.order, embedding_dim=dim(150), hidden=(), context="diagonal",
                                           output="class", objective="nce",
                                           noise_samples=max(1, s.noise_samples // 10),
                                           variable_history=False, clustering="brown"),
        # V-NNLM (Zamora-Martinez et al.): one net for every history length, softmax
        # normalisers of frequent contexts precomputed (fallback normalisation).
        "V-NNLM fallback": NeuralConfig(order=s.order, embedding_dim=dim(150), hidden=(dim(500),),
                                        context="full", output="softmax", objective="nce",
                                        noise_samples=s.noise_samples, variable_history=True,
                                        full_history=1.0 / (s.order - 1), clustering="brown"),
    }


NORMALIZATION_MODES = {
    "Vaswani NCE": ("exact", "unnormalized"),
    "Baltescu class NCE": ("class", "unnormalized"),
    "V-NNLM fallback": ("exact", "fallback", "unnormalized"),
}


def stage_neural(run, label, config):
    """Train one neural configuration, then score it in each normalisation mode."""
    path = os.path.join(run.models_dir, label.lower().replace(" ", "-") + ".nplm")
    tc = TrainConfig(epochs=run.s.epochs, threads=run.s.threads, time_limit=run.s.neural_minutes * 60,
                     seed=1)
    sidecar = path + ".train.json"
    reused = run.s.reuse and _reusable(path, sidecar, config)
    if reused:
        with open(sidecar, encoding="utf-8") as f:
            train_s = json.load(f)["train_s"]
        run.log(f"   reusing {path} (same configuration, trained in {train_s:.0f} s)")
        run.reused_s += train_s
    else:
        t0 = time.perf_counter()
        train(run.text["train"], run.text["valid"], path, config, tc, log=lambda m: run.log("   " + m),
              progress=False)
        train_s = time.perf_counter() - t0
        with atomic_write(sidecar, "w") as f:
            json.dump({"train_s": train_s, "net": config.to_json()}, f)
    extra = "; reused from an earlier run" if reused else ""
    if config.variable_history and "fallback" not in container.read(path).config:
        t1 = time.perf_counter()
        sizes = precompute(path, run.text["train"], min_count=2, progress=False)
        extra += f"; fallback tables: {sum(sizes):,} contexts in {time.perf_counter() - t1:.1f} s"
    ckpt = path + ".ckpt"
    if os.path.exists(ckpt):
        os.remove(ckpt)       # a checkpoint is resumable state, not part of the model
    history = container.read(path).config.get("training", {}).get("history", [])
    run.models[label] = {"path": path, "normalization": NORMALIZATION_MODES[label][0], "train_s": train_s,
                         "history": history}
    shape = (f"order {config.order}, emb {config.embedding_dim}, hidden {list(config.hidden) or 'none'}, "
             f"{config.context} context, {config.output} output, {config.objective} k={config.noise_samples}")
    for mode in NORMALIZATION_MODES[label]:
        row = Row(label, "neural", normalization=mode, train_s=train_s, size_bytes=_size(path),
                  published=PUBLISHED["NNLM"] if label == "Vaswani NCE" and mode == "exact" else None,
                  note=f"{len(history)} epochs" + ("; not a normalised distribution" if mode == "unnormalized"
                                                    else ""))
        run.add(measure(run, lambda: _open_model(path, mode), row))  # noqa: B023 - measured within this iteration
    return f"{shape}; trained {len(history)} epochs in {train_s:.0f} s{extra}"


def _reusable(path, sidecar, config):
    """Whether ``path`` is a finished model of exactly ``config`` (with its training time)."""
    if not (os.path.exists(path) and os.path.exists(sidecar)):
        return False
    try:
        return container.read(path).config.get("net") == config.to_json()
    except (OSError, ValueError):
        return False


def _best_neural(run):
    """The neural model with the lowest validation perplexity under a normalised mode."""
    best = None
    for r in run.rows:
        if r.family == "neural" and r.normalization not in ("unnormalized", "fallback") and r.valid_ppl \
                and (best is None or r.valid_ppl < best.valid_ppl):
            best = r
    if best is None:
        raise RuntimeError("no neural model was trained")
    return best.model


def stage_interpolate(run, mode):
    """KN5 + the best neural model, weights tuned on valid (EM / Newton)."""
    kn = run.need(f"KN{run.s.order}")
    label = _best_neural(run)
    nn = run.need(label)
    comps = [_open_model(kn["path"]), _open_model(nn["path"], nn["normalization"])]
    mix = interpolate(comps, mode=mode)
    t0 = time.perf_counter()
    res = mix.tune(run.text["valid"], threads=run.s.threads, max_contexts=run.s.tune_contexts or None)
    tune_s = time.perf_counter() - t0
    spec = os.path.join(run.models_dir, f"kn{run.s.order}+nnlm.{mode}.json")
    mix.save(spec, dev_perplexity=res.perplexity)
    run.models[f"mixture {mode}"] = {"path": spec, "normalization": None, "label": f"KN{run.s.order} + {label}",
                                     "train_s": kn["train_s"] + nn["train_s"] + tune_s}
    row = Row(f"KN{run.s.order} + {label}", "interpolated", normalization=mode,
              size_bytes=_size(kn["path"], nn["path"], spec), train_s=kn["train_s"] + nn["train_s"] + tune_s,
              published=PUBLISHED["NNLM+KN5"] if mode == "linear" else None,
              valid_ppl=None if res.sampled else res.perplexity,
              note="weights " + " / ".join(f"{w:.3f}" for w in res.weights) + f" (tuned in {tune_s:.1f} s"
                   + (f" on {res.tokens:,} tokens of sampled valid contexts: ppl {res.perplexity:.1f})"
                      if res.sampled else ")"))
    # valid perplexity: the tuned value itself (a second pass over valid would only repeat it)
    run.add(measure(run, lambda: _open_model(spec), row, valid=False))
    return f"{label}: weights {list(round(float(w), 4) for w in res.weights)}, valid ppl {res.perplexity:.2f}"


def stage_distil(run):
    """The KN5 + neural linear mixture (else the best neural model) as a back-off ARPA
    over the training text's n-grams, then as an nplm binary.  The mixture is the
    better teacher: a fixed-history net asked about a short history (as the lower
    orders of the table are) sees <null> padding it was never trained on, while the
    mixture's KN part answers such questions properly."""
    if "mixture linear" in run.models:
        label = run.models["mixture linear"]["label"]
        nn = run.models["mixture linear"]
        teacher = _open_model(nn["path"])
    else:
        label = _best_neural(run)
        nn = run.need(label)
        teacher = _open_model(nn["path"], nn["normalization"])
    order = run.s.distil_order
    arpa = os.path.join(run.models_dir, f"distilled{order}.arpa")
    binary = os.path.join(run.models_dir, f"distilled{order}.nplm")
    t0 = time.perf_counter()
    tables = distil_to_file(teacher, arpa, order, run.text["train"], min_count=1, threads=run.s.threads)
    build_binary(arpa, binary)
    dt = time.perf_counter() - t0
    row = Row(f"{label} distilled to {order}-gram", "distilled", train_s=nn["train_s"] + dt,
              size_bytes=_size(binary),
              note=f"ARPA {_size(arpa) / 2**20:.1f} MiB, {sum(int(c) for c in tables.counts):,} n-grams; "
                   f"distilled in {dt:.0f} s")
    run.add(measure(run, lambda: _open_model(binary), row))
    return f"teacher {label}, order {order}"


def stage_quantise(run, dtype):
    """float16 / int8 copy of the Vaswani model (or the best neural one)."""
    label = "Vaswani NCE" if "Vaswani NCE" in run.models else _best_neural(run)
    nn = run.need(label)
    dst = os.path.join(run.models_dir, os.path.basename(nn["path"]).replace(".nplm", f".{dtype}.nplm"))
    t0 = time.perf_counter()
    _, _, rep = convert(nn["path"], dst, to=dtype, text=run.text["test"])
    dt = time.perf_counter() - t0
    row = Row(f"{label} {dtype}", "quantised", normalization=nn["normalization"], size_bytes=_size(dst),
              train_s=nn["train_s"] + dt)
    try:
        measure(run, lambda: _open_model(dst, nn["normalization"]), row)
    except Exception as e:    # nplm.Model may not load quantised files yet: keep convert's figure
        if "perplexity_after" not in rep:
            raise
        row.test_ppl = rep["perplexity_after"]
        row.note = f"not queryable through nplm.Model ({type(e).__name__}: {str(e)[:120]}); perplexity from convert"
    if "perplexity_change" in rep:
        row.note = (row.note + "; " if row.note else "") + \
            f"perplexity change vs float32 {100 * rep['perplexity_change']:+.3f}%"
    run.add(row)
    return f"{label} -> {dtype} in {dt:.1f} s"


# --------------------------------------------------------------------------- report


def _fmt(x, spec):
    return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _mib(b):
    return None if b is None else b / 2**20


def _seconds(x):
    return _fmt(x, ".1f" if x is not None and x < 10 else ",.0f")


def results_table(rows):
    head = ("| model | normalisation | test ppl | published | valid ppl | size (MiB) | training (s) "
            "| query µs/token | tokens/s (batch) | notes |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
    body = "".join(
        f"| {r.model} | {r.normalization or '–'} | {_fmt(r.test_ppl, '.1f')}{' ‡' if r.partial else ''} "
        f"| {_fmt(r.published, '.1f')} "
        f"| {_fmt(r.valid_ppl, '.1f')} | {_fmt(_mib(r.size_bytes), '.2f')} | {_seconds(r.train_s)} "
        f"| {_fmt(r.us_per_token, '.2f')} | {_fmt(r.tokens_per_s, ',.0f')} | {r.note.replace('|', '/')} |\n"
        for r in rows)
    return head + body


def stages_table(stages):
    head = "| stage | status | time (s) | detail |\n|---|---|---:|---|\n"
    return head + "".join(f"| {s.name} | {s.status} | {s.seconds:.1f} | {s.detail} |\n" for s in stages)


def _short(r):
    """A compact plot label: 'Vaswani NCE [exact]' -> 'Vaswani/exact'."""
    name = r.model.replace(" class NCE", "").replace(" NCE", "").replace(" fallback", "")
    name = name.replace(" distilled to ", " → ")
    return name + (f"/{r.normalization}" if r.normalization else "")


def plot_memory(run, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    markers = {"back-off": "s", "neural": "o", "interpolated": "D", "distilled": "^", "quantised": "v"}
    pts = [r for r in run.rows if r.test_ppl and r.size_bytes and r.normalization != "unnormalized"
           and r.family in markers and not r.partial]
    if not pts:
        raise RuntimeError("no model to plot")
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for fam, mk in markers.items():
        sel = [r for r in pts if r.family == fam]
        if sel:
            ax.scatter([_mib(r.size_bytes) for r in sel], [r.test_ppl for r in sel], marker=mk, s=50, label=fam)
    # Points of one model sit close together: stagger the labels vertically.
    for i, r in enumerate(sorted(pts, key=lambda r: (r.size_bytes, r.test_ppl))):
        ax.annotate(_short(r), (_mib(r.size_bytes), r.test_ppl), fontsize=6.5,
                    xytext=(5, (i % 3 - 1) * 9), textcoords="offset points", va="center")
    for i, (name, v) in enumerate(PUBLISHED.items()):
        ax.axhline(v, ls=":", lw=0.8, color="grey")
        ax.annotate(f"published {name} {v}", (0.02 + 0.33 * i, v), xycoords=("axes fraction", "data"),
                    fontsize=7, color="grey", xytext=(0, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("model size on disk (MiB, log scale)")
    ax.set_ylabel("PTB test perplexity")
    ax.set_title("Perplexity vs memory (Baltescu & Blunsom 2015, Fig. 2's question)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_epochs(run, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = 0
    for label, m in run.models.items():
        h = m.get("history")
        if h:
            ax.plot([e["epoch"] for e in h], [e["valid_ppl"] for e in h], marker="o", label=label)
            drawn += 1
    kn = run.models.get(f"KN{run.s.order}")
    knrow = [r for r in run.rows if r.model == f"KN{run.s.order}"]
    if kn and knrow and knrow[0].valid_ppl:
        ax.axhline(knrow[0].valid_ppl, ls="--", color="k", lw=1, label=f"KN{run.s.order} (valid)")
    if not drawn:
        plt.close(fig)
        raise RuntimeError("no training history to plot")
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation perplexity (exact normalisation)")
    ax.set_yscale("log")
    ax.set_title("Validation perplexity per epoch")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _machine():
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}; load average {load:.1f} at the end of the run")


def results_section(run, plots):
    """The README's "Results" section (Markdown)."""
    s = run.s
    what = ("**quick mode** (small subset, tiny networks: the numbers only show the pipeline works)"
            if s.quick else "full PTB (train 887k words, test 82,430 tokens with </s>)")
    lines = [
        "## Results",
        "",
        f"Produced by `{run.command}` on {what}; "
        f"{_machine()}. Each neural model trained for at most {s.neural_minutes:g} minutes "
        f"({s.threads} threads) on a shared machine, so they are far from converged and far below the "
        "papers' training budgets (days of CPU time); the published column gives the papers' figures.",
        "",
        "Test perplexity is KenLM query's (OOVs included, one `</s>` per sentence); size is the model "
        "file(s) on disk; query µs/token is the kenlm-style `model.full_scores(sentence)` loop, "
        "tokens/s the batched `full_scores_batch` path; training time includes tuning/distillation for "
        "derived models. `unnormalized` rows are self-normalised scores, not a distribution.",
        "",
        results_table(run.rows),
    ]
    if any(r.partial for r in run.rows):
        lines += ["‡ scored on a prefix of the test text only (the whole text would take longer than the "
                  f"run's {s.eval_seconds:g} s budget per text; see the notes): not comparable with the "
                  "other rows.", ""]
    missing = [st for st in run.stages if st.status != "ok"]
    if missing:
        lines += ["Stages that did not run: " + "; ".join(f"{st.name} ({st.status})" for st in missing), ""]
    for name, title in plots:
        lines += [f"![{title}]({name})", ""]
    return "\n".join(lines)


def write_report(run, started):
    plots = []
    for fn, name, title in ((plot_memory, "perplexity_vs_memory.png", "perplexity vs memory"),
                            (plot_epochs, "validation_per_epoch.png", "validation perplexity per epoch")):
        try:
            fn(run, os.path.join(run.out, name))
            plots.append((name, title))
            continue
        except ImportError:
            run.log(f"   {name}: matplotlib is not installed (pip install 'nplm[plot]'); tables only")
        except Exception as e:
            run.log(f"   {name} not drawn: {type(e).__name__}: {e}")
        try:        # an earlier run's picture would not match this report
            os.unlink(os.path.join(run.out, name))
        except FileNotFoundError:
            pass
    total = time.time() - started
    section = results_section(run, plots)
    report = "\n".join([
        "# nplm on Penn Treebank: reproduction report",
        "",
        f"Run {'(quick mode) ' if run.s.quick else ''}finished {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{total / 60:.1f} minutes in all"
        + (f" (plus {run.reused_s / 60:.1f} minutes of neural training done by an earlier run with the same "
           "settings and reused)" if run.reused_s else "") + f". Data: `{run.data}`.",
        "",
        section.replace("## Results", "## Models", 1),
        "## Stages",
        "",
        stages_table(run.stages),
        "## Settings",
        "",
        "```",
        json.dumps(dataclasses.asdict(run.s), indent=1),
        "```",
        "",
    ])
    with atomic_write(os.path.join(run.out, "report.md"), "w") as f:
        f.write(report)
    with atomic_write(os.path.join(run.out, "results-section.md"), "w") as f:
        f.write(section)
    data = {"settings": dataclasses.asdict(run.s), "seconds": total, "published": PUBLISHED,
            "rows": [dataclasses.asdict(r) for r in run.rows],
            "stages": [dataclasses.asdict(st) for st in run.stages],
            "histories": {k: v.get("history") for k, v in run.models.items() if v.get("history")}}
    with atomic_write(os.path.join(run.out, "results.json"), "w") as f:
        json.dump(data, f, indent=1, default=lambda x: None if isinstance(x, float) and not math.isfinite(x) else x)
    return os.path.join(run.out, "report.md")


# --------------------------------------------------------------------------- driver


PTB_FILES = ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt")


def stage_names(settings):
    """The stages a run has, in order (``data`` always runs first)."""
    s = settings
    try:
        neural = list(neural_configs(s))
    except Exception:
        neural = ["Vaswani NCE", "Baltescu class NCE", "V-NNLM fallback"]
    return (["data"] + list(dict.fromkeys(f"KN{o}" for o in (1, 3, s.order))) + ["kenlm reference"] + neural
            + ["interpolate linear", "interpolate loglinear", "distil", "quantise float16", "quantise int8"])


def reproduce(data, out, settings=None, log=None, only=None, command=None):  # noqa: C901 - runs the recipe's steps in order, each optional
    """Run the whole pipeline; returns the Run (rows, stages) after writing the report
    to ``out/report.md``.  ``only``: optional set of stage-name prefixes to run
    (``data`` always runs); each must start some stage's name (ValueError listing them
    otherwise).  The report and results.json then hold only the stages run: they
    replace an earlier run's.  ``command``: how the run was started, for the report.
    A missing data directory or PTB file is an error before anything is written."""
    s = settings or Settings.full_preset()
    if s.threads < 1:
        raise ValueError(f"threads must be at least 1, not {s.threads}")
    if only is not None:
        names = stage_names(s)
        unknown = [p for p in only if not any(n.startswith(p) for n in names)]
        if unknown:
            raise ValueError(f"no stage named {', '.join(map(repr, sorted(unknown)))} (a stage name or its "
                             f"beginning); the stages are: {', '.join(names)}")
    if not os.path.isdir(data):
        raise FileNotFoundError(2, "no such data directory", data)
    missing = [f for f in PTB_FILES if not os.path.isfile(os.path.join(data, f))]
    if missing:
        raise FileNotFoundError(2, f"the data directory has no {', '.join(missing)} (the PTB text files)", data)
    os.makedirs(out, exist_ok=True)
    run = Run(data, out, s, log, command)
    started = time.time()

    def want(name):
        return only is None or any(name.startswith(p) for p in only)
    if not run.stage("data", stage_data):
        write_report(run, started)
        return run
    for order in (1, 3, s.order):
        if want(f"KN{order}"):
            run.stage(f"KN{order}", stage_kneser_ney, order)
    if want("kenlm"):
        run.stage("kenlm reference", stage_kenlm_reference)
    try:
        configs = neural_configs(s)
    except Exception as e:
        configs = {}
        run.stages.append(Stage("neural", f"not available: {type(e).__name__}: {e}"))
    for label, cfg in configs.items():
        if want(label):
            run.stage(label, stage_neural, label, cfg)
    for mode in ("linear", "loglinear"):
        if want(f"interpolate {mode}"):
            run.stage(f"interpolate {mode}", stage_interpolate, mode)
    if want("distil"):
        run.stage("distil", stage_distil)
    for dtype in ("float16", "int8"):
        if want(f"quantise {dtype}"):
            run.stage(f"quantise {dtype}", stage_quantise, dtype)
    path = write_report(run, started)
    run.log(f"report: {path}")
    return run
