"""``nplm train --engine torch``: the neural n-gram trainer on PyTorch, on CPU or CUDA,
in one process or several (launched by ``torchrun``: data parallel over
torch.distributed, gloo on CPU, NCCL on GPUs).

The network, its initialisation, noise distributions, class and tree structures and
the model file are nplm's own (nplm.neural.network, nplm.neural.train): the engine
holds the same parameters as tensors and writes the trained model through
NeuralNet.save, so the file loads everywhere nplm loads models, without torch.

Data parallelism: ``--minibatch`` is the global batch, split among the processes;
every process reads its own shard of the training files (nplm.neural.stream), and all
run the same number of steps per epoch (a process whose shard is used up contributes
empty batches).  Each step the processes sum their dense gradients (all_reduce) and
combine the rows of the embedding and output tables they touched (all_gather), so
every replica applies the same update, as one process would with the whole batch.
"""
import dataclasses
import hashlib
import math
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as tdist

from nplm.errors import FormatError
from nplm.io.progress import tqdm
from nplm.neural import stream as streams
from nplm.neural import torch_net as tn
from nplm.neural.network import LOG10E, PARAM_NAMES, NeuralConfig, NeuralNet
from nplm.neural.train import CHECKPOINT_SUFFIX, RESUMABLE, Noise, TrainConfig, output_structures, truncate_histories
from nplm.neural.vocab import Vocabulary, examples, read_sentences

ENGINE = "torch"
BROWN_TOKENS = 50_000_000    # Brown clustering reads at most this many tokens of the training text
EMA_EVERY = 16               # steps between moving-average updates, as the Cython trainer


@dataclasses.dataclass
class TorchOptions:
    """Settings of the torch engine beyond TrainConfig."""
    device: str = "cpu"
    shuffle_buffer: int = streams.SHUFFLE_BUFFER
    checkpoint_minutes: float = 30.0   # also write the checkpoint this often within an epoch (0: only at epoch ends)
    stop_after_steps: int = 0          # stop within the first epoch after this many steps, as a time limit does (tests)


def refusals(config, tc, ensemble=1):
    """One-line messages naming each setting the torch engine does not support."""
    out = []
    if config.tie_embeddings:
        out.append("--tie-embeddings is not supported by --engine torch; use --engine cython")
    if ensemble > 1:
        out.append("--ensemble is not supported by --engine torch; train the members one by one")
    if tc.parallel != "hogwild":
        out.append("--parallel is a setting of the Cython engine; --engine torch parallelises through torch")
    return out


# ------------------------------------------------------------------ processes

class Dist:
    """This process's place among the torchrun processes (world 1 without torchrun)."""

    def __init__(self, device):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if device == "cuda":
            if not torch.cuda.is_available():
                raise ValueError("--device cuda: torch sees no CUDA device here (use --device cpu)")
            self.device = torch.device("cuda", local % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        elif device == "cpu":
            self.device = torch.device("cpu")
        else:
            raise ValueError(f"--device must be cpu or cuda, not {device!r}")
        self.owned = False
        if self.world > 1 and not tdist.is_initialized():
            tdist.init_process_group("nccl" if device == "cuda" else "gloo")
            self.owned = True

    def gather_objects(self, obj):
        if self.world == 1:
            return [obj]
        out = [None] * self.world
        tdist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj):
        if self.world == 1:
            return obj
        box = [obj]
        tdist.broadcast_object_list(box, src=0)
        return box[0]

    def all_reduce(self, t):
        if self.world > 1:
            tdist.all_reduce(t)
        return t

    def barrier(self):
        if self.world > 1:
            tdist.barrier()

    def close(self):
        if self.owned:
            tdist.destroy_process_group()


def sync_rows(dist, ids, g):
    """Rows ``ids`` with gradients ``g`` (U, cols) of every process, summed per row:
    (distinct ids, summed gradients), the same on every process."""
    cnt = torch.tensor([ids.numel()], device=g.device)
    counts = [torch.zeros_like(cnt) for _ in range(dist.world)]
    tdist.all_gather(counts, cnt)
    counts = [int(c) for c in counts]
    mx = max(counts)
    pid = torch.zeros(mx, dtype=ids.dtype, device=g.device)
    pg = torch.zeros((mx, g.shape[1]), dtype=g.dtype, device=g.device)
    pid[:ids.numel()], pg[:ids.numel()] = ids, g
    all_ids = [torch.empty_like(pid) for _ in range(dist.world)]
    all_g = [torch.empty_like(pg) for _ in range(dist.world)]
    tdist.all_gather(all_ids, pid)
    tdist.all_gather(all_g, pg)
    cat_ids = torch.cat([a[:n] for a, n in zip(all_ids, counts)])
    cat_g = torch.cat([a[:n] for a, n in zip(all_g, counts)])
    uniq, inv = torch.unique(cat_ids, return_inverse=True)
    return uniq, torch.zeros((uniq.numel(), g.shape[1]), dtype=g.dtype, device=g.device).index_add_(0, inv, cat_g)


# ------------------------------------------------------------------ data

def fingerprint(path):
    """A data file's identity for resume checks: size and SHA-256 of its first MiB."""
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(1 << 20)).hexdigest()
    return {"path": os.path.abspath(path), "bytes": os.path.getsize(path), "sha256_head": head}


def count_shards(paths, dist):
    """Merged word counts and per-process shard sizes; each process counts a
    contiguous block of the files, merged in file order."""
    n = len(paths)
    lo, hi = n * dist.rank // dist.world, n * (dist.rank + 1) // dist.world
    mine = streams.count_files(paths[lo:hi], dist.world)
    stats = [s for part in dist.gather_objects(mine) for s in part]
    return streams.merge_counts(stats), streams.shard_sizes(stats, dist.world)


def build_vocab(counts, paths, tc):
    if not any(c for w, c in counts.items() if w != "</s>"):
        raise FormatError("the training text has no words", paths[0])
    vocab = Vocabulary.build(counts, min_count=tc.min_count, max_size=tc.vocab_size or None)
    if len(vocab) - 4 < 2:
        raise FormatError(f"the training text has {len(vocab) - 4} distinct word type(s) in the vocabulary; "
                          "a language model needs at least two", paths[0])
    return vocab


def read_valid(path, vocab, order):
    """Validation examples (contexts, targets) in memory, checked as the Cython trainer does."""
    if path is None:
        return None
    sents = read_sentences(path)
    if not any(sents):
        raise FormatError("the validation text has no words", path)
    toks = [t for s in sents for t in s]
    if not any(t in vocab.index and t != "<unk>" for t in toks):
        raise FormatError("every word of the validation text is out of the training vocabulary", path)
    return examples(sents, vocab, order)


def brown_targets(paths, vocab, order):
    """The targets of the first BROWN_TOKENS examples, files in order."""
    out, n = [], 0
    s = streams.ExampleStream(paths, vocab, order)
    for _, t in s.chunks(None):
        out.append(t)
        n += t.size
        if n >= BROWN_TOKENS:
            break
    return np.concatenate(out)[:BROWN_TOKENS]


def create_net(config, vocab, paths, tc, dist, log):
    """A fresh NeuralNet, identical on every process (structures made on rank 0)."""
    structs = None
    if dist.rank == 0:
        need = config.output == "class" and config.clustering == "brown"
        targets = brown_targets(paths, vocab, config.order) if need else np.zeros(0, np.int32)
        structs = output_structures(config, vocab, targets, tc.seed, log)
    wc, tree = dist.broadcast_object(structs)
    return NeuralNet.create(config, vocab, word_class=wc, tree=tree, seed=tc.seed)


# ------------------------------------------------------------------ training

def _seed(*parts):
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little") >> 1


class TorchTrainer:
    """Training state: parameters, optimiser state, average, schedule and position."""

    def __init__(self, net, stream, valid, tc, opts, dist, sizes, log=print, progress=True):
        self.tc, self.opts, self.dist, self.log, self.progress = tc, opts, dist, log, progress
        self.net, self.stream, self.valid, self.sizes = net, stream, valid, sizes
        self.S = tn.TorchNet(net, dist.device)
        self.P = self.S.params()
        self.A = {n: torch.zeros_like(p) for n, p in self.P.items()}
        self.ema = {n: p.clone() for n, p in self.P.items()} if tc.average > 0 else None
        self.dense = tn.dense_names(self.S)
        self.noise = Noise(net, tc.seed + 7 * dist.rank) if net.config.objective == "nce" else None
        self.noise_consts = tn.noise_constants(self.noise, dist.device) if self.noise else None
        W, B = dist.world, tc.minibatch
        self.local_b = [B // W + (r < B % W) for r in range(W)]
        self.steps = max(math.ceil(n / b) if b else 0 for n, b in zip(sizes, self.local_b))
        self.N = sum(sizes)
        self.epoch, self.step, self.lr, self.halvings = 0, 0, tc.learning_rate, 0
        self.best, self.best_params, self.history = math.inf, None, []
        self.epoch_loss, self.epoch_seen = 0.0, 0
        self.data_id = None
        self.deadline = None
        self.last_ckpt = time.time()
        self.final, self.final_ppl = None, math.nan    # weights of a stop within an epoch, when better

    # -- one step
    def _global_count(self, step):
        return sum(max(0, min(b, n - step * b)) for n, b in zip(self.sizes, self.local_b))

    def _prepare(self, ctx, tgt, step):
        cfg, tc, dev = self.net.config, self.tc, self.dist.device
        if cfg.variable_history:
            rng = np.random.default_rng(_seed(tc.seed, self.epoch, step, self.dist.rank, "history"))
            ctx = truncate_histories(ctx, rng, cfg.full_history)
        ctx = torch.from_numpy(np.asarray(self.net.input_ids(ctx), np.int64)).to(dev)
        tgt = torch.from_numpy(np.asarray(self.net.unit_ids(tgt), np.int64)).to(dev)
        noise = None
        if self.noise is not None:
            self.noise.state[0] = np.uint64(_seed(tc.seed, self.epoch, step, self.dist.rank, "noise"))
            noise = tn.NoiseDraw(self.noise.draw(), self.noise_consts)
        torch.manual_seed(_seed(tc.seed, self.epoch, step, self.dist.rank, "dropout"))
        return ctx, tgt, noise

    def _gradients(self, batch, step):
        """(local loss sum, dense grads, [(table, ids, grads)]) of this process's batch."""
        ctx, tgt = batch
        if tgt.size == 0:      # shard used up: take part in the collectives with nothing
            dense = {n: torch.zeros_like(self.P[n]) for n in self.dense}
            return 0.0, dense, []
        c, t, noise = self._prepare(ctx, tgt, step)
        loss, rows, leaves = tn.step_loss(self.P, self.S, c, t, noise, self.tc.dropout, self.tc.input_dropout,
                                          self.dense)
        (loss / self._global_count(step)).backward()
        dense = {n: (q.grad if q.grad is not None else torch.zeros_like(q)) for n, q in leaves.items()}
        out = []
        for name, R in rows:
            g = R.w.grad if R.b is None else torch.cat([R.w.grad, R.b.grad[:, None]], 1)
            out.append((name, R.ids, g))
        return float(loss.detach()), dense, out

    def _synchronise(self, loss, dense, rows, flags):
        """Sum dense gradients, this step's loss and the flags over the processes;
        combine the row gradients.  Returns (loss, rows, flags)."""
        cols = {"emb": self.P["emb"].shape[1], "out": self.P["out_w"].shape[1] + 1}
        if self.dist.world > 1:
            names = ["emb", "out"] if self.S.sparse_out else ["emb"]
            have = {n: (ids, g) for n, ids, g in rows}
            rows = []
            for n in names:
                ids, g = have.get(n, (torch.zeros(0, dtype=torch.int64, device=self.dist.device),
                                      torch.zeros((0, cols[n]), device=self.dist.device)))
                rows.append((n,) + sync_rows(self.dist, ids, g))
        flat = torch.cat([dense[n].reshape(-1) for n in self.dense]
                         + [torch.tensor([loss] + flags, dtype=torch.float32, device=self.dist.device)])
        self.dist.all_reduce(flat)
        off = 0
        for n in self.dense:
            k = dense[n].numel()
            dense[n] = flat[off:off + k].view_as(dense[n])
            off += k
        tail = flat[off:].tolist()
        return tail[0], rows, tail[1:]

    def _apply(self, dense, rows):
        adagrad, lr, l2 = self.tc.optimizer == "adagrad", self.lr, self.tc.l2
        for n, g in dense.items():
            tn.update_dense(self.P, self.A, n, g, lr, l2, adagrad)
        for name, ids, g in rows:
            if name == "emb":
                tn.update_rows(self.P, self.A, "emb", ids, g, lr, l2, adagrad)
            else:
                tn.update_rows(self.P, self.A, "out_w", ids, g[:, :-1], lr, l2, adagrad)
                tn.update_rows(self.P, self.A, "out_b", ids, g[:, -1], lr, l2, adagrad)

    def _ema_step(self):
        alpha = min(1.0, EMA_EVERY * self.tc.minibatch / (self.tc.average * max(self.N, 1)))
        with torch.no_grad():
            for n, e in self.ema.items():
                e.add_(self.P[n] - e, alpha=alpha)

    def _flags(self, step):
        o = self.opts
        stop = (self.deadline is not None and time.time() > self.deadline) or \
            (o.stop_after_steps and self.epoch == 0 and step + 1 >= o.stop_after_steps)
        ckpt = o.checkpoint_minutes > 0 and time.time() - self.last_ckpt > 60 * o.checkpoint_minutes
        return [float(bool(stop)), float(bool(ckpt))]

    def _batches(self):
        """This process's batches of the epoch from the current step on, padded with
        empty ones up to the common step count."""
        m = self.net.config.order - 1
        b = self.local_b[self.dist.rank]
        done = self.step
        if b:
            for batch in self.stream.batches(self.epoch, b, skip=self.step):
                yield batch
                done += 1
        empty = (np.zeros((0, m), np.int32), np.zeros(0, np.int32))
        for _ in range(done, self.steps):
            yield empty

    def run_epoch(self, checkpoint):
        """Steps to the epoch's end, or until the time limit: returns whether it finished."""
        bar = self._bar()
        for batch in self._batches():
            if self.step >= self.steps:
                break
            loss, dense, rows = self._gradients(batch, self.step)
            loss, rows, flags = self._synchronise(loss, dense, rows, self._flags(self.step))
            self._apply(dense, rows)
            self.step += 1
            if self.ema is not None and self.step % EMA_EVERY == 0:
                self._ema_step()
            self.epoch_loss += loss
            self.epoch_seen += self._global_count(self.step - 1)
            if bar is not None:
                bar.update(self._global_count(self.step - 1))
            if flags[0] > 0:
                return self._close_bar(bar, False)
            if flags[1] > 0 and checkpoint:
                self.save_checkpoint(checkpoint)
        return self._close_bar(bar, True)

    def _bar(self):
        if not self.progress or self.dist.rank != 0:
            return None
        return tqdm(total=self.N, initial=self.epoch_seen, unit="ex", unit_scale=True, desc=f"epoch {self.epoch + 1}",
                    file=sys.stderr, mininterval=1.0, smoothing=0.1, disable=None)

    @staticmethod
    def _close_bar(bar, finished):
        if bar is not None:
            bar.close()
        return finished

    # -- validation and schedule
    def evaluated(self):
        return self.ema if self.ema is not None else self.P

    def valid_ppl(self, params):
        """Exact validation perplexity, the rows split among the processes."""
        if self.valid is None:
            return math.nan
        ctx, tgt = self.valid
        r, W = self.dist.rank, self.dist.world
        c, t = ctx[r::W], tgt[r::W]
        lp = tn.score_examples(params, self.S, self.net.input_ids(c), self.net.unit_ids(t))
        if self.net.shortlist is not None:
            lp = lp + self.net.shortlist.log_ratio[t]
        tot = torch.tensor([lp.sum(), float(t.size)], dtype=torch.float64, device=self.dist.device)
        self.dist.all_reduce(tot)
        return float(np.exp(-tot[0].item() / tot[1].item()))

    def _end_epoch(self, finished, t0):
        """Validation, best weights, learning-rate halving and the log line."""
        ppl = self.valid_ppl(self.evaluated())
        note = ""
        if not finished:
            # within an epoch: the schedule and best weights stay the epoch boundary's
            # (a resume goes on from there); only the saved model may take these weights
            if self.valid is None or ppl < self.best:
                self.final = {n: p.clone() for n, p in self.evaluated().items()}
                self.final_ppl = ppl
        elif self.valid is None or ppl < self.best:
            self.best = ppl
            self.best_params = {n: p.clone() for n, p in self.evaluated().items()}
        else:
            for n, b in self.best_params.items():
                self.P[n].copy_(b)
                if self.ema is not None:
                    self.ema[n].copy_(b)
            self.lr /= 2
            self.halvings += 1
            note = f" (worse: back to best, learning rate halved to {self.lr:.3g})"
        loss = self.epoch_loss / max(self.epoch_seen, 1)
        speed = self.epoch_seen / max(time.time() - t0, 1e-9)
        if finished:
            self.history.append({"epoch": self.epoch + 1, "loss": loss, "valid_ppl": ppl, "lr": self.lr})
        else:
            note += f" (stopped after {self.epoch_seen:,} of its {self.N:,} examples)"
        valid = f", valid ppl {ppl:.2f}" if self.valid is not None else ""
        self._log(f"epoch {self.epoch + 1}: train loss {loss:.4f}{valid}, {speed:,.0f} examples/s{note}")

    def _log(self, msg):
        if self.dist.rank == 0:
            self.log(msg)

    def train(self, checkpoint=None):
        """Epochs until the limit, early stop or time limit; returns the final weights."""
        tc = self.tc
        t_start = time.time()
        self.deadline = t_start + tc.time_limit if tc.time_limit else None
        while self.epoch < tc.epochs:
            t0 = time.time()
            finished = self.run_epoch(checkpoint)
            self._end_epoch(finished, t0)
            if finished:
                self.epoch, self.step, self.epoch_loss, self.epoch_seen = self.epoch + 1, 0, 0.0, 0
                self._resync()
            if checkpoint:
                self.save_checkpoint(checkpoint)
            if not finished or (self.deadline is not None and time.time() > self.deadline):
                self._log("stopping: time limit reached")
                break
            if self.halvings > tc.max_halvings:
                self._log("stopping early: validation perplexity stopped improving")
                break
        if self.final is not None:
            return self.final
        return self.best_params if self.best_params is not None else self.evaluated()

    def _resync(self):
        """Rank 0's weights to every process (their updates are identical on CPU; CUDA's
        row additions are not bit-reproducible, so the replicas are realigned each epoch)."""
        if self.dist.world > 1 and self.dist.device.type == "cuda":
            for group in (self.P, self.A) + ((self.ema,) if self.ema is not None else ()):
                for t in group.values():
                    tdist.broadcast(t, 0)

    # -- checkpoints
    def state(self):
        return {"engine": ENGINE, "epoch": self.epoch, "step": self.step, "epoch_loss": self.epoch_loss,
                "epoch_seen": self.epoch_seen, "lr": self.lr, "halvings": self.halvings,
                "best": None if not math.isfinite(self.best) else self.best, "history": self.history,
                "train_config": dataclasses.asdict(self.tc), "world": self.dist.world, "shard_sizes": self.sizes,
                "data": self.data_id}

    def save_checkpoint(self, path):
        self.last_ckpt = time.time()
        if self.dist.rank != 0:
            return
        extra = {"opt." + n: a.cpu().numpy() for n, a in self.A.items()}
        if self.best_params is not None:
            extra.update({"best." + n: a.cpu().numpy() for n, a in self.best_params.items()})
        if self.ema is not None:
            extra.update({"ema." + n: a.cpu().numpy() for n, a in self.ema.items()})
        self.S.to_net(self.P).save(path, extra_config={"checkpoint": self.state()}, extra_arrays=extra)

    def load_state(self, state, arrays):
        def t(name):
            return torch.from_numpy(np.array(arrays[name], np.float32)).to(self.dist.device)
        for n in PARAM_NAMES:
            self.A[n].copy_(t("opt." + n))
        if "best.emb" in arrays:
            self.best_params = {n: t("best." + n) for n in PARAM_NAMES}
        if self.ema is not None:
            if "ema.emb" not in arrays:
                raise ValueError("the checkpoint has no weight average; resume with the --average it was made with")
            for n in PARAM_NAMES:
                self.ema[n].copy_(t("ema." + n))
        for k in ("epoch", "step", "epoch_loss", "epoch_seen", "lr", "halvings", "history"):
            setattr(self, k, state[k])
        self.best = math.inf if state["best"] is None else state["best"]


# ------------------------------------------------------------------ resume

def read_checkpoint(ckpt):
    """(net, state, arrays) of a torch-engine checkpoint."""
    if not os.path.exists(ckpt):
        raise FileNotFoundError(2, "no checkpoint to resume from", ckpt)
    net, c = NeuralNet.load(ckpt, return_container=True, copy=True)
    state = c.config.get("checkpoint")
    if state is None:
        raise FormatError("not a training checkpoint", ckpt)
    if state.get("engine", "cython") != ENGINE:
        raise ValueError(f"{ckpt} was written by the {state.get('engine', 'cython')} engine; resume it with "
                         f"--engine {state.get('engine', 'cython')}")
    return net, state, c.arrays


def resume_conflicts(old, state, config, tc, data_id, world):
    """Lines naming each option or input that differs from the checkpoint's."""
    out = []
    for f in dataclasses.fields(NeuralConfig):
        a, b = getattr(old.config, f.name), getattr(config, f.name)
        if a != b:
            out.append(f"--{f.name.replace('_', '-')}: {a} in the checkpoint, {b} now")
    for name, a in state.get("train_config", {}).items():
        if name not in RESUMABLE and hasattr(tc, name) and getattr(tc, name) != a:
            out.append(f"--{name.replace('_', '-')}: {a} in the checkpoint, {getattr(tc, name)} now")
    saved = state.get("data") or {}
    for key in ("train", "valid"):
        a, b = saved.get(key), data_id[key]
        strip = (lambda d: None if d is None else [(x["bytes"], x["sha256_head"]) for x in d])
        if strip(a) != strip(b):
            out.append(f"--{key}: other files than the checkpoint's")
    if state["step"] and state.get("world") != world:
        out.append(f"processes: {state.get('world')} in the checkpoint (taken within an epoch), {world} now")
    return out


# ------------------------------------------------------------------ entry point

def train(train_paths, valid_path, out_path, config=None, tconfig=None, opts=None, resume=False, log=print,
          progress=True, keep_checkpoint=True):
    """Train with the torch engine and save to ``out_path`` (rank 0 writes); the
    arguments are those of nplm.neural.train.train, ``train_paths`` a list of files
    (or glob patterns) and ``opts`` TorchOptions.  Returns the trained NeuralNet."""
    opts = opts or TorchOptions()
    if resume and (config is None or tconfig is None):
        old, state, _ = read_checkpoint(os.fspath(out_path) + CHECKPOINT_SUFFIX)
        config = config or old.config
        tconfig = tconfig or TrainConfig(**{k: v for k, v in state.get("train_config", {}).items()
                                            if k in {f.name for f in dataclasses.fields(TrainConfig)}})
    config = (config or NeuralConfig()).validate()
    tc = (tconfig or TrainConfig()).validate()
    for msg in refusals(config, tc):
        raise ValueError(msg)
    torch.set_num_threads(tc.threads)
    dist = Dist(opts.device)
    if tc.minibatch < dist.world:
        dist.close()
        raise ValueError(f"--minibatch {tc.minibatch} is the global batch: it needs at least one example for each "
                         f"of the {dist.world} processes")
    try:
        return _train(streams.expand_paths(train_paths), valid_path, os.fspath(out_path), config, tc, opts, dist,
                      resume, log, progress, keep_checkpoint)
    finally:
        dist.close()


def _setup(paths, valid_path, ckpt, config, tc, dist, resume, log):
    """(net, shard sizes, checkpoint state and arrays or None) for a fresh start or a resume."""
    data_id = {"train": [fingerprint(p) for p in paths],
               "valid": None if valid_path is None else [fingerprint(valid_path)]}
    if resume:
        old, state, arrays = read_checkpoint(ckpt)
        conflicts = resume_conflicts(old, state, config, tc, data_id, dist.world)
        if conflicts:
            raise ValueError(f"cannot resume from {ckpt}: it was made with other settings or data:\n  "
                             + "\n  ".join(conflicts))
        sizes = state.get("shard_sizes") if state.get("world") == dist.world else None
        if sizes is None:
            _, sizes = count_shards(paths, dist)
        return old, sizes, (state, arrays), data_id
    counts, sizes = count_shards(paths, dist)
    vocab = build_vocab(counts, paths, tc)
    net = create_net(config, vocab, paths, tc, dist, log)
    return net, sizes, None, data_id


def _train(paths, valid_path, out_path, config, tc, opts, dist, resume, log, progress, keep_checkpoint):
    ckpt = out_path + CHECKPOINT_SUFFIX
    say = log if dist.rank == 0 else (lambda s: None)
    net, sizes, saved, data_id = _setup(paths, valid_path, ckpt, config, tc, dist, resume, say)
    valid = read_valid(valid_path, net.vocab, net.config.order)
    stream = streams.ExampleStream(paths, net.vocab, net.config.order, dist.rank, dist.world, tc.seed,
                                   opts.shuffle_buffer)
    say(f"vocabulary: {len(net.vocab)} words; {sum(sizes):,} training examples in {len(paths)} file(s)"
        + (f", {valid[1].size:,} validation" if valid is not None else "")
        + f"; torch engine on {dist.world} process(es), device {dist.device}")
    trainer = TorchTrainer(net, stream, valid, tc, opts, dist, sizes, log=say, progress=progress)
    trainer.data_id = data_id
    if saved is not None:
        trainer.load_state(*saved)
        say(f"resuming in epoch {trainer.epoch + 1} after {trainer.step} of its {trainer.steps} steps")
    final = trainer.S.to_net(trainer.train(checkpoint=ckpt))
    if dist.rank == 0:
        final.save(out_path, extra_config={"training": {"history": trainer.history, "engine": ENGINE,
                                                        "processes": dist.world,
                                                        "train_config": dataclasses.asdict(tc)}})
        if not keep_checkpoint and os.path.exists(ckpt):
            os.remove(ckpt)
        best = trainer.final_ppl if trainer.final is not None else trainer.best
        valid_note = f"; validation perplexity {best:.2f}" if valid is not None else ""
        say(f"saved {out_path}{valid_note}")
    dist.barrier()
    return final


def log10_scores(net, contexts, words, device="cpu"):
    """log10 p(word | context) of a NeuralNet by the torch forward pass (word ids of
    the whole vocabulary, as NeuralNet.log10_prob takes them)."""
    S = tn.TorchNet(net, device)
    lp = tn.score_examples(S.params(), S, net.input_ids(np.asarray(contexts)), net.unit_ids(np.asarray(words)))
    if net.shortlist is not None:
        lp = lp + net.shortlist.log_ratio[np.asarray(words)]
    return lp * LOG10E
