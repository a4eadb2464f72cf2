"""Training driver for the neural n-gram models: data, noise, minibatch SGD/AdaGrad,
learning-rate halving, early stopping, checkpoints and resume.

Threads: the kernels run every minibatch without the GIL; large products go to
OpenBLAS (its thread count is set here) and per-example loops to OpenMP with the same
count.  With ``threads=1`` a fixed seed gives a bit-identical model.
"""
import contextlib
import dataclasses
import hashlib
import math
import os
import sys
import threading
import time

import numpy as np

from nplm._kernels import MAX_THREADS
from nplm.errors import FormatError
from nplm.io.progress import tqdm
from nplm.neural import _noise, clusters
from nplm.neural.network import PARAM_NAMES, NeuralConfig, NeuralNet, set_blas_threads
from nplm.neural.shortlist import Shortlist
from nplm.neural.vocab import BOS, NULL, Vocabulary, check_corpus, count_words, examples, read_sentences

CHECKPOINT_SUFFIX = ".ckpt"


@dataclasses.dataclass
class TrainConfig:
    """Optimisation settings.  The defaults train the recommended PTB model."""
    epochs: int = 20
    minibatch: int = 128
    learning_rate: float = 0.05
    optimizer: str = "adagrad"
    l2: float = 0.0
    dropout: float = 0.4
    input_dropout: float = 0.2    # on the context embeddings
    threads: int = 2
    seed: int = 1
    min_count: int = 1
    vocab_size: int = 0           # 0: no cap
    max_halvings: int = 4         # stop after this many learning-rate halvings
    time_limit: float = 0.0       # seconds, 0 = none; stops within the epoch that crosses it
    parallel: str = "hogwild"     # or "blas": split each minibatch over OpenMP/OpenBLAS threads
    average: float = 0.25         # evaluate/keep an exponential moving average of the weights
                                  # with this time constant in epochs (0: the raw weights)

    def validate(self):
        def need(cond, msg):
            if not cond:
                raise ValueError(msg)
        need(self.epochs >= 1, f"epochs must be at least 1, not {self.epochs}")
        need(self.minibatch >= 1, f"minibatch size must be positive, not {self.minibatch}")
        need(self.learning_rate > 0 and math.isfinite(self.learning_rate),
             f"learning rate must be positive, not {self.learning_rate}")
        need(self.optimizer in ("sgd", "adagrad"), f"optimizer must be 'sgd' or 'adagrad', not {self.optimizer!r}")
        need(self.l2 >= 0, f"L2 weight must be non-negative, not {self.l2}")
        need(0 <= self.dropout < 1, f"dropout must be in [0, 1), not {self.dropout}")
        need(0 <= self.input_dropout < 1, f"input dropout must be in [0, 1), not {self.input_dropout}")
        need(not isinstance(self.threads, bool) and isinstance(self.threads, int)
             and 1 <= self.threads <= MAX_THREADS,
             f"threads must be an integer from 1 to {MAX_THREADS}, not {self.threads!r}")
        need(self.min_count >= 1, f"min count must be at least 1, not {self.min_count}")
        need(self.vocab_size >= 0, f"vocabulary size cap must be non-negative, not {self.vocab_size}")
        need(self.parallel in ("hogwild", "blas"), f"parallel must be 'hogwild' or 'blas', not {self.parallel!r}")
        need(self.max_halvings >= 0, f"max halvings must be non-negative, not {self.max_halvings}")
        need(self.time_limit >= 0 and not math.isnan(self.time_limit),
             f"time limit must be a non-negative number of seconds (0: none), not {self.time_limit}")
        need(self.average >= 0 and math.isfinite(self.average),
             f"averaging time constant must be a non-negative number of epochs, not {self.average}")
        return self


# ------------------------------------------------------------------ data

class Corpus:
    """Training/validation examples and vocabulary, validated with friendly errors."""

    def __init__(self, train_path, valid_path, order, min_count=1, vocab_size=0, vocab=None):
        train = read_sentences(train_path)
        check_corpus(train, train_path, "training")
        counts = count_words(train)
        if vocab is None:
            vocab = Vocabulary.build(counts, min_count=min_count, max_size=vocab_size or None)
        regular = len(vocab) - 4
        if regular < 2:
            raise FormatError(f"the training text has {regular} distinct word type(s) in the vocabulary; "
                              "a language model needs at least two", train_path)
        self.vocab = vocab
        self.train = examples(train, vocab, order)
        self.valid = None
        if valid_path is not None:
            valid = read_sentences(valid_path)
            check_corpus(valid, valid_path, "validation")
            toks = [t for s in valid for t in s]
            if toks and not any(t in vocab.index and t not in ("<unk>",) for t in toks):
                raise FormatError("every word of the validation text is out of the training vocabulary",
                                  valid_path)
            self.valid = examples(valid, vocab, order)


def noise_weights(net):
    """Unigram noise distribution over the net's output units: training counts, every
    predictable word at least 1; <s> and <null> (never predicted) nearly never drawn."""
    w = np.maximum(net.unit_counts.astype(np.float64), 1.0)
    w[BOS] = w[NULL] = 0.01
    return w


class Noise:
    """Alias tables and log(k q) terms for NCE (softmax or class-factored)."""

    def __init__(self, net, seed):
        self.k = net.config.noise_samples
        self.state = np.array([seed * 0x9E3779B97F4A7C15 % (1 << 64)], np.uint64)
        w = noise_weights(net)
        k = self.k
        if net.config.output == "softmax":
            self.prob, self.alias = _noise.build_alias(w)
            self.logkq = np.log(k * w / w.sum())
            self.n1 = np.zeros(k, np.int32)
            self.n2 = np.zeros(0, np.int32)
            self.logkq2 = np.zeros(0)
            self.class_mode = False
        else:
            s = net.structs
            C = net.n_classes
            wc = s["word_class"]
            cw = np.bincount(wc, weights=w, minlength=C)
            self.prob, self.alias = _noise.build_alias(cw)
            self.logkq = np.log(k * cw / cw.sum())
            rows = w[s["class_words"]]           # weights in class (out_w row) order
            self.cprob = np.empty(rows.size)
            self.calias = np.empty(rows.size, np.int32)
            cs = s["class_start"]
            for c in range(C):
                p, a = _noise.build_alias(np.ascontiguousarray(rows[cs[c]:cs[c + 1]]))
                self.cprob[cs[c]:cs[c + 1]] = p
                self.calias[cs[c]:cs[c + 1]] = a
            self.class_start = np.ascontiguousarray(cs, np.int32)
            self.logkq2 = np.log(k * rows / cw[wc[s["class_words"]]])
            self.n1 = np.zeros(k, np.int32)
            self.n2 = np.zeros(C * k, np.int32)
            self.class_mode = True
        self.logkq = self.logkq.astype(np.float32)
        self.logkq2 = self.logkq2.astype(np.float32)

    def draw(self):
        _noise.sample_alias(self.prob, self.alias, 0, self.n1, self.state)
        if self.class_mode:
            _noise.sample_classes(self.cprob, self.calias, self.class_start, self.k, self.n2, self.state)
        return (self.n1, self.logkq, self.n2, self.logkq2)


def epoch_rng(seed, epoch):
    """The generator of an epoch's example order (its first draw, a permutation of the
    examples) and then of its truncated histories."""
    return np.random.default_rng([seed, epoch])


def epoch_noise_state(seed, epoch, worker):
    """The noise generator's state at the start of an epoch: each of the trainer's
    engines draws one stream an epoch from here."""
    return np.uint64((seed * 1000003 + epoch * 101 + worker) % (1 << 63))


def truncate_histories(contexts, rng, full_history):
    """Variable-history training (Zamora-Martinez et al. 2.1): a share ``full_history``
    of the examples keeps its whole context of n-1 words, the others a uniformly drawn
    number 1..n-2 of their most recent words; the rest become <null>.  The paper draws
    1..n-1 uniformly, which is ``full_history`` = 1/(n-1)."""
    N, m = contexts.shape
    if m == 1:
        return contexts.copy()
    keep = np.where(rng.random(N) < full_history, m, rng.integers(1, m, size=N))
    drop = np.arange(m)[None, :] < (m - keep)[:, None]
    out = contexts.copy()
    out[drop] = NULL
    return out


# ------------------------------------------------------------------ classes and trees

def output_structures(config, vocab, train_targets, seed, log):
    """Word classes (class output) or Huffman tree (tree output) from nplm.clusters,
    over the net's output units (with a shortlist: its words, the specials and the OOS
    unit, which then stands for every other word in the text and counts)."""
    sl = Shortlist.of(config, vocab)
    V = sl.n_units if sl else len(vocab)
    counts = sl.unit_counts if sl else vocab.counts
    if sl:
        train_targets = sl.out_map[train_targets]
    if config.output == "class":
        C = config.classes or max(2, int(round(math.sqrt(V))))
        if C > V:
            raise ValueError(f"{C} classes for a vocabulary of {V} words")
        if config.clustering == "frequency":
            wc = clusters.frequency_bins(counts, C)
        else:
            t0 = time.time()
            wc = clusters.brown_clusters(train_targets, V, C, seed=seed)
            log(f"Brown clustering into {C} classes: {time.time() - t0:.1f} s")
        return np.asarray(wc, np.int32), None
    if config.output == "tree":
        tree = clusters.huffman_tree(np.maximum(counts, 1))
        return None, (tree.points, tree.codes, tree.lengths)
    return None, None


# ------------------------------------------------------------------ training

class Trainer:
    def __init__(self, net, corpus, tc, log=print, progress=True):
        self.net, self.corpus, self.tc, self.log, self.progress = net, corpus, tc, log, progress
        # the examples as the engines read them: embedding rows and output units (word
        # ids themselves without a shortlist); validation goes through the net's
        # word-level scoring
        ctx, tgt = corpus.train
        self.train_rows = (np.ascontiguousarray(net.input_ids(ctx), np.int32),
                           np.ascontiguousarray(net.unit_ids(tgt), np.int32))
        # training works on private writeable copies; net.params are replaced at the end
        self.params = [np.array(net.params[n], dtype=np.float32, copy=True) for n in PARAM_NAMES]
        # Tied embeddings: one table in output-row order serves as both layers; the
        # engine reads context words through word_pos (the identity for softmax output).
        self.in_map = None
        if net.config.tie_embeddings:
            i_emb, i_out = PARAM_NAMES.index("emb"), PARAM_NAMES.index("out_w")
            self.params[i_emb] = self.params[i_out]
            if net.config.output == "class":
                self.in_map = np.ascontiguousarray(net.structs["word_pos"], np.int32)
        B = tc.minibatch
        # Hogwild (Recht et al. 2011): one single-threaded engine per thread, all sharing the
        # parameters and AdaGrad state, each updating them without locks.  It beats
        # splitting every minibatch over OpenMP/OpenBLAS threads here, whose many short
        # parallel regions per batch cost more than they save (see tools/bench_train.py).
        self.hogwild = tc.threads > 1 and tc.parallel == "hogwild"
        n_eng = tc.threads if self.hogwild else 1
        inner = 1 if self.hogwild else tc.threads
        set_blas_threads(inner)
        # keep the net's config, vocabulary and structures, not its initial weights
        # (one more copy of the model for the whole run)
        self.net = NeuralNet(net.config, net.vocab, dict(zip(PARAM_NAMES, self.params)), net.structs)
        self.engine, self.grads, self.accum = net.engine(B, nthreads=inner, params=self.params)
        self.engines = [self.engine] + [net.engine(B, nthreads=1, params=self.params, accum=self.accum)[0]
                                        for _ in range(n_eng - 1)]
        self.noises = ([Noise(net, tc.seed + 7 * w) for w in range(n_eng)]
                       if net.config.objective == "nce" else [None] * n_eng)
        self.epoch = 0
        self.lr = tc.learning_rate
        self.halvings = 0
        self.best = math.inf
        self.best_params = None
        self.history = []
        # Polyak-style averaging: SGD's last iterate is noisy, the running mean of the
        # recent iterates generalises better; validation, early stopping and the saved
        # model use the average.
        self.ema = [p.copy() for p in self.params] if tc.average > 0 else None
        self._ema_tmp = None
        self.data_id = None    # {"train": ..., "valid": ...} fingerprints, kept in checkpoints
        self.deadline = None   # time.time() at which --time-limit stops training, within an epoch
        self.cut_short = 0     # examples of the last epoch when the deadline ended it early

    def _net_view(self, params):
        n = self.net
        p = dict(zip(PARAM_NAMES, params))
        if n.config.tie_embeddings:
            # word-id order for the input side, as every model file stores it
            p["emb"] = p["out_w"] if self.in_map is None else np.ascontiguousarray(
                p["out_w"][n.structs["word_pos"]])
        return NeuralNet(n.config, n.vocab, p, n.structs)

    EMA_EVERY = 16     # minibatches of engine 0 between average updates

    EMA_CHUNK = 1 << 16  # elements per slice of the average update (256 KiB: stays in L2)

    def _ema_step(self, alpha):
        # slice by slice through one small buffer (the same float32 operations): a
        # full-size temporary was one more copy of the weights for the whole run
        if self._ema_tmp is None:
            self._ema_tmp = np.empty(self.EMA_CHUNK, np.float32)
        for p, e in zip(self.params, self.ema):
            pf, ef = p.reshape(-1), e.reshape(-1)
            for lo in range(0, pf.size, self.EMA_CHUNK):
                hi = min(lo + self.EMA_CHUNK, pf.size)
                t = self._ema_tmp[:hi - lo]
                np.subtract(pf[lo:hi], ef[lo:hi], out=t)
                t *= alpha
                ef[lo:hi] += t

    def evaluated(self):
        """The weights validation sees and training returns: the average, or the raw ones."""
        return self.ema if self.ema is not None else self.params

    def valid_ppl(self, params=None):
        if self.corpus.valid is None:
            return math.nan
        net = self._net_view(self.params if params is None else params)
        return net.perplexity(*self.corpus.valid, threads=self.tc.threads)   # --threads 1 means one

    def run_epoch(self):  # noqa: C901 - the epoch loop: updates, averaging, validation and time limit in order
        tc, _eng = self.tc, self.engine
        ctx_all, tgt_all = self.train_rows
        N = tgt_all.size
        rng = epoch_rng(tc.seed, self.epoch)
        perm = rng.permutation(N)
        ctx = np.ascontiguousarray(ctx_all[perm])
        tgt = np.ascontiguousarray(tgt_all[perm])
        if self.net.config.variable_history:
            ctx = truncate_histories(ctx, rng, self.net.config.full_history)
        if self.in_map is not None:
            ctx = self.in_map[ctx]
        for w, nz in enumerate(self.noises):
            if nz is not None:
                nz.state[0] = epoch_noise_state(tc.seed, self.epoch, w)
        B = tc.minibatch
        bar = None
        if self.progress:
            # disable=None: no bar unless stderr is a terminal
            bar = tqdm(total=N, unit="ex", unit_scale=True, desc=f"epoch {self.epoch + 1}", file=sys.stderr,
                       mininterval=1.0, smoothing=0.1, disable=None)
        t0 = time.time()
        adagrad = tc.optimizer == "adagrad"
        seed_base = (tc.seed * 7919 + self.epoch) << 24
        n_eng = len(self.engines)
        seen = [0] * n_eng
        losses = [0.0] * n_eng
        errors = []
        out_of_time = []
        deadline = self.deadline
        lr = self.lr
        # one average update spans EMA_EVERY batches of every engine
        ema_alpha = (min(1.0, self.EMA_EVERY * B * n_eng / (tc.average * N))
                     if self.ema is not None else 0.0)

        def work(w):
            eng, noise = self.engines[w], self.noises[w]
            try:
                for bi, lo in enumerate(range(w * B, N, B * n_eng)):
                    hi = min(lo + B, N)
                    nz = noise.draw() if noise is not None else None
                    loss = eng.step(ctx[lo:hi], tgt[lo:hi], nz, tc.dropout, seed_base + lo, True, 1.0 / (hi - lo),
                                    tc.input_dropout)
                    if not math.isfinite(loss):
                        raise FloatingPointError(f"training diverged at epoch {self.epoch + 1} (loss {loss}); "
                                                 f"try a smaller learning rate than {lr}")
                    eng.update(lr, tc.l2, adagrad)
                    if ema_alpha and w == 0 and bi % self.EMA_EVERY == self.EMA_EVERY - 1:
                        self._ema_step(ema_alpha)
                    losses[w] += loss
                    seen[w] += hi - lo
                    if n_eng == 1 and bi % 20 == 0:
                        report()
                    if errors or out_of_time:
                        return
                    if deadline is not None and time.time() > deadline:
                        out_of_time.append(True)
                        return
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        def report(final=False):
            done = sum(seen)
            if bar is not None:
                bar.update(done - bar.n)
                bar.set_postfix(loss=f"{sum(losses) / max(done, 1):.3f}", lr=f"{self.lr:.3g}")

        if n_eng == 1:
            work(0)
        else:
            threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(n_eng)]
            for th in threads:
                th.start()
            # Wait on every thread until the next redraw is due: joining only the first
            # returned at once after it ended, and the loop then redrew in a spin.
            due = time.monotonic() + 1.0
            while True:
                for th in threads:
                    th.join(max(0.0, due - time.monotonic()))
                if not any(th.is_alive() for th in threads):
                    break
                report()
                due = time.monotonic() + 1.0
        if errors:
            raise errors[0]
        report(True)
        total_loss, seen = sum(losses), sum(seen)
        if bar is not None:
            bar.close()
        self.cut_short = seen if out_of_time and seen < N else 0
        self.epoch += 1
        return total_loss / max(seen, 1), seen / max(time.time() - t0, 1e-9)

    def train(self, checkpoint=None, stop_after=None):
        tc = self.tc
        t_start = time.time()
        self.deadline = t_start + tc.time_limit if tc.time_limit else None
        while self.epoch < tc.epochs:
            loss, speed = self.run_epoch()
            ppl = self.valid_ppl(self.evaluated())
            note = ""
            if self.ema is not None and self.corpus.valid is not None:
                note = f" (raw weights {self.valid_ppl():.2f})"
            if self.corpus.valid is None or ppl < self.best:
                self.best = ppl
                self.best_params = [p.copy() for p in self.evaluated()]
            else:
                # worse than the best epoch: go back to it and halve the step size
                for p, b in zip(self.params, self.best_params):
                    p[...] = b
                if self.ema is not None:
                    for e, b in zip(self.ema, self.best_params):
                        e[...] = b
                self.lr /= 2
                self.halvings += 1
                note += f" (worse: back to best, learning rate halved to {self.lr:.3g})"
            # (speed stays out of the saved history so that equal runs give equal bytes)
            self.history.append({"epoch": self.epoch, "loss": loss, "valid_ppl": ppl, "lr": self.lr})
            # (no validation text: no figure rather than "valid ppl nan")
            valid = f", valid ppl {ppl:.2f}" if self.corpus.valid is not None else ""
            if self.cut_short:
                note += f" (time limit: stopped after {self.cut_short:,} of its examples)"
            self.log(f"epoch {self.epoch}: train loss {loss:.4f}{valid}, {speed:,.0f} examples/s{note}")
            if checkpoint:
                self.save_checkpoint(checkpoint)
            if self.halvings > tc.max_halvings:
                self.log("stopping early: validation perplexity stopped improving")
                break
            if tc.time_limit and time.time() - t_start > tc.time_limit:
                self.log("stopping: time limit reached")
                break
            if stop_after is not None and self.epoch >= stop_after:
                break
        final = self.best_params if self.best_params is not None else self.evaluated()
        return self._net_view([p.copy() for p in final])

    # -- checkpoints: the current model plus everything needed to continue
    def save_checkpoint(self, path):
        net = self._net_view(self.params)
        state = {"epoch": self.epoch, "lr": self.lr, "halvings": self.halvings,
                 "best": None if not math.isfinite(self.best) else self.best, "history": self.history,
                 "train_config": dataclasses.asdict(self.tc)}
        if self.data_id is not None:
            state["data"] = self.data_id
        extra = {"opt." + n: a for n, a in zip(PARAM_NAMES, self.accum)}
        if self.best_params is not None:
            extra.update({"best." + n: a for n, a in zip(PARAM_NAMES, self.best_params)})
        if self.ema is not None:
            extra.update({"ema." + n: a for n, a in zip(PARAM_NAMES, self.ema)})
        net.save(path, extra_config={"checkpoint": state}, extra_arrays=extra)

    def load_checkpoint(self, path):
        net, c = NeuralNet.load(path, return_container=True)
        state = c.config.get("checkpoint")
        if state is None:
            raise FormatError("not a training checkpoint", path)
        if net.config != self.net.config or net.vocab.words != self.net.vocab.words:
            raise FormatError("checkpoint was made with a different configuration or vocabulary", path)
        for p, n in zip(self.params, PARAM_NAMES):
            p[...] = net.params[n]
        for a, n in zip(self.accum, PARAM_NAMES):
            a[...] = c.arrays["opt." + n]
        if "best.emb" in c.arrays:
            self.best_params = [np.array(c.arrays["best." + n]) for n in PARAM_NAMES]
        if self.ema is not None:
            if "ema.emb" not in c.arrays:
                raise FormatError("checkpoint has no weight average; resume with the averaging setting "
                                  "it was made with", path)
            for e, n in zip(self.ema, PARAM_NAMES):
                e[...] = c.arrays["ema." + n]
        self.epoch, self.lr, self.halvings = state["epoch"], state["lr"], state["halvings"]
        self.best = math.inf if state["best"] is None else state["best"]
        self.history = state["history"]


def file_fingerprint(path):
    """Identity of a data file for resume checks: its size and SHA-256 (the path is
    kept for the message only, so a moved file still matches)."""
    if path is None:
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return {"path": os.path.abspath(path), "bytes": os.path.getsize(path), "sha256": h.hexdigest()}


# Settings that may change when training resumes: when to stop, and how many threads.
RESUMABLE = ("epochs", "time_limit", "max_halvings", "threads", "parallel")


def _flag_value(v):
    if isinstance(v, (tuple, list)):
        return ",".join(map(str, v)) or "none"
    return str(v)


def resume_conflicts(old_config, state, config, tc, data_id):  # noqa: C901 - compares each saved option with its own message
    """How the given settings and data differ from a checkpoint's, as lines naming
    the command-line option; settings that do not apply (noise samples without NCE,
    classes without class output) are skipped.  ``config``/``tc`` None: not given."""
    out = []

    def differ(name, a, b):
        if a != b:
            out.append(f"--{name.replace('_', '-')}: {_flag_value(a)} in the checkpoint, {_flag_value(b)} now")
    if config is not None:
        for f in dataclasses.fields(NeuralConfig):
            if f.name == "noise_samples" and old_config.objective != "nce":
                continue
            if f.name in ("classes", "clustering") and old_config.output != "class":
                continue
            differ(f.name, getattr(old_config, f.name), getattr(config, f.name))
    saved_tc = state.get("train_config")
    if tc is not None and saved_tc:
        for f in dataclasses.fields(TrainConfig):
            if f.name not in RESUMABLE and f.name in saved_tc:
                differ(f.name, saved_tc[f.name], getattr(tc, f.name))
    saved = state.get("data")
    if saved is not None:
        def describe(d):
            return "none" if d is None else f"{d['path']} ({d['bytes']:,} bytes, sha256 {d['sha256'][:12]})"
        for key in ("train", "valid"):
            a, b = saved.get(key), data_id[key]
            same = (a is None and b is None) or (a is not None and b is not None and
                                                 (a["bytes"], a["sha256"]) == (b["bytes"], b["sha256"]))
            if not same:
                out.append(f"--{key}: {describe(a)} in the checkpoint, {describe(b)} now")
    return out


def _read_checkpoint(out_path):
    """(path, network, checkpoint record) of the checkpoint ``out_path + '.ckpt'``."""
    ckpt = os.fspath(out_path) + CHECKPOINT_SUFFIX
    if not os.path.exists(ckpt):
        raise FileNotFoundError(2, "no checkpoint to resume from", ckpt)
    old, cont = NeuralNet.load(ckpt, return_container=True)
    state = cont.config.get("checkpoint")
    if state is None:
        raise FormatError("not a training checkpoint", ckpt)
    return ckpt, old, state


def _saved_train_config(state):
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in (state.get("train_config") or {}).items() if k in known})


def checkpoint_settings(out_path):
    """(NeuralConfig, TrainConfig) the checkpoint ``out_path + '.ckpt'`` was made with:
    what a resume keeps where the command line says nothing."""
    _, old, state = _read_checkpoint(out_path)
    return old.config, _saved_train_config(state)


def train(train_path, valid_path, out_path, config=None, tconfig=None, resume=False, log=print,
          progress=True, keep_checkpoint=True):
    """Train a neural n-gram model and save it to ``out_path``.

    A checkpoint ``out_path + '.ckpt'`` is written after every epoch, and when the
    time limit stops an epoch; ``resume=True`` continues from it. The checkpoint
    records the settings and the data (size and SHA-256 of the training and validation
    texts); resuming with other ones is refused with a list of the differences, except
    for ``RESUMABLE`` settings.

    Parameters
    ----------
    train_path, valid_path : str or path
        Training and validation texts, one sentence per line (plain or compressed).
        ``valid_path`` may be None: no validation, learning-rate halving or early stop.
    out_path : str or path
        Where the model is written (atomically).
    config : NeuralConfig, optional
        The network; the default is the recommended model. On resume, None takes the
        checkpoint's.
    tconfig : TrainConfig, optional
        Training settings; on resume, None takes the checkpoint's.
    resume : bool
        Continue from ``out_path + '.ckpt'``.
    log : callable
        Receives each message line (epochs, notes, the saved model and its validation
        perplexity).
    progress : bool
        Draw a progress bar (only when stderr is a terminal).
    keep_checkpoint : bool
        Keep the checkpoint after success (the command line removes it by default).

    Returns
    -------
    NeuralNet
        The trained network (the best epoch's weights)."""
    if config is not None or not resume:
        config = (config or NeuralConfig()).validate()
    if tconfig is not None or not resume:
        tconfig = (tconfig or TrainConfig()).validate()
    tc = tconfig
    ckpt = os.fspath(out_path) + CHECKPOINT_SUFFIX
    data_id = {"train": file_fingerprint(train_path), "valid": file_fingerprint(valid_path)}
    vocab = None
    if resume:
        ckpt, old, state = _read_checkpoint(out_path)
        engine = state.get("engine", "cython")
        if engine != "cython":
            raise ValueError(f"{ckpt} was written by the {engine} engine; resume it with --engine {engine}")
        conflicts = resume_conflicts(old.config, state, config, tc, data_id)
        if conflicts:
            raise ValueError(f"cannot resume from {ckpt}: it was made with other settings or data:\n  "
                             + "\n  ".join(conflicts) + "\nresume with the checkpoint's settings and data "
                             "(only --epochs, --time-limit, --max-halvings and --threads may change), or "
                             "remove the checkpoint to start afresh")
        if state.get("data") is None:
            log(f"note: {ckpt} does not record its training data (an older checkpoint); "
                "make sure --train and --valid are the texts it was trained on")
        if tc is None:
            tc = _saved_train_config(state).validate()
        vocab, config = old.vocab, old.config
    corpus = Corpus(train_path, valid_path, config.order, tc.min_count, tc.vocab_size, vocab=vocab)
    log(f"vocabulary: {len(corpus.vocab)} words; {corpus.train[1].size:,} training examples"
        + (f", {corpus.valid[1].size:,} validation" if corpus.valid is not None else ""))
    if resume:
        net = old
        net = NeuralNet(old.config, old.vocab, {n: np.array(old.params[n]) for n in PARAM_NAMES},
                        {k: np.array(v) for k, v in old.structs.items()})
    else:
        wc, tree = output_structures(config, corpus.vocab, corpus.train[1], tc.seed, log)
        net = NeuralNet.create(config, corpus.vocab, word_class=wc, tree=tree, seed=tc.seed)
    trainer = Trainer(net, corpus, tc, log=log, progress=progress)
    del net     # the trainer has its own copy of the weights
    trainer.data_id = data_id
    if resume:
        trainer.load_checkpoint(ckpt)
        log(f"resuming after epoch {trainer.epoch}")
    final = trainer.train(checkpoint=ckpt)
    final.save(out_path, extra_config={"training": {"history": trainer.history,
                                                    "train_config": dataclasses.asdict(tc)}})
    if not keep_checkpoint:
        with contextlib.suppress(FileNotFoundError):
            os.remove(ckpt)
    valid = f"; validation perplexity {trainer.best:.2f}" if corpus.valid is not None else ""
    log(f"saved {os.fspath(out_path)}{valid}")
    return final
