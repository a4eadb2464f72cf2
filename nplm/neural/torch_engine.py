"""Training nplm's feed-forward network with PyTorch: on a GPU, or on several
processes and machines under ``torchrun`` (DistributedDataParallel), writing nplm's
own model file (install ``nplm[torch]``; ``nplm train --engine torch``).

One definition of the network: the parameters are those ``NeuralNet.create`` makes
(names, shapes, initial values, vocabulary, word classes), trained as torch tensors
and written back into a ``NeuralNet`` that ``NeuralNet.save`` writes.  A model file
from either engine loads in every query path, with no torch needed there.

The forward pass is nplm's (nplm/neural/network.py's docstring): embeddings, a full
or diagonal context layer, up to two more dense layers, then a softmax or a
class-factored output.  Objectives: NCE (softmax output; noise shared by the
minibatch) or exact MLE (softmax or class output: a class output is trained by
MLE here, its normaliser being cheap on a GPU).  Variable history, dropout, input
dropout, AdaGrad or SGD, the weight average, learning-rate halving and the time
limit follow nplm's trainer (nplm/neural/train.py).  Tree outputs, shortlists and
tied embeddings are refused by name.
"""
import dataclasses
import math
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from nplm.errors import FormatError
from nplm.io.atomic import atomic_write
from nplm.neural import torch_data
from nplm.neural.network import NeuralNet
from nplm.neural.train import noise_weights, output_structures
from nplm.neural.vocab import NULL, Vocabulary

TRAINED = ("emb", "ctx", "b0", "w1", "b1", "w2", "b2", "out_w", "out_b", "cls_w", "cls_b")
CLUSTER_TOKENS = 20_000_000     # Brown clustering sees the stream's first tokens
EMA_EVERY = 16


def check_supported(config, objective_given):
    """ValueError naming the option the torch engine does not train."""
    if config.output == "tree":
        raise ValueError("--engine torch trains softmax and class outputs, not --output tree")
    if config.shortlist:
        raise ValueError("--engine torch does not train shortlists (--shortlist)")
    if config.tie_embeddings:
        raise ValueError("--engine torch does not train tied embeddings (--tie-embeddings)")
    if config.output == "class" and objective_given == "nce":
        raise ValueError("--engine torch trains a class output by exact MLE: give --objective mle (or none)")


class TorchNet(torch.nn.Module):
    """nplm's network as torch parameters, initialised from a NeuralNet."""

    def __init__(self, net):
        super().__init__()
        c = net.config
        self.context, self.output = c.context, c.output
        self.act = {"relu": torch.relu, "tanh": torch.tanh, "identity": lambda x: x}[c.activation]
        self.params = torch.nn.ParameterDict({n: torch.nn.Parameter(torch.from_numpy(np.array(net.params[n])))
                                              for n in TRAINED if np.asarray(net.params[n]).size})
        if c.output == "class":
            s = net.structs
            self.register_buffer("row_class", torch.from_numpy(np.asarray(s["word_class"])[s["class_words"]]
                                                                .astype(np.int64)))
            self.register_buffer("word_class", torch.from_numpy(np.asarray(s["word_class"], np.int64)))
            self.register_buffer("word_pos", torch.from_numpy(np.asarray(s["word_pos"], np.int64)))

    def hidden(self, ctx, dropout=0.0, input_dropout=0.0):
        p = self.params
        x = p["emb"][ctx]                                   # (B, m, d)
        x = F.dropout(x, input_dropout, self.training)
        if self.context == "full":
            h = x.reshape(x.shape[0], -1) @ p["ctx"] + p["b0"]
        else:
            h = (x * p["ctx"]).sum(1) + p["b0"]
        h = F.dropout(self.act(h), dropout, self.training)
        for w, b in (("w1", "b1"), ("w2", "b2")):
            if w in p:
                h = F.dropout(self.act(h @ p[w] + p[b]), dropout, self.training)
        return h

    def log_probs(self, h):
        """Natural-log p(w | h) of every output unit (B, V): the exact distribution."""
        p = self.params
        s = h @ p["out_w"].T + p["out_b"]
        if self.output == "softmax":
            return torch.log_softmax(s, -1)
        cls = torch.log_softmax(h @ p["cls_w"].T + p["cls_b"], -1)       # (B, C)
        # a softmax over the rows of each class (rows are in class order), each
        # shifted by its class's maximum
        index = self.row_class.expand_as(s)
        mx = torch.full_like(cls, -math.inf).scatter_reduce(1, index, s, "amax").detach()
        shifted = s - mx.gather(1, index)
        sums = torch.zeros_like(cls).index_add_(1, self.row_class, torch.exp(shifted))
        rows = shifted - torch.log(sums).gather(1, index) + cls.gather(1, index)
        return rows[:, self.word_pos]                                    # word order

    def target_log_prob(self, h, tgt):
        """Natural-log p(tgt | h) (B,), as log_probs gives it, without the (B, V) gathers."""
        p = self.params
        s = h @ p["out_w"].T + p["out_b"]
        if self.output == "softmax":
            return -F.cross_entropy(s, tgt, reduction="none")
        cls = torch.log_softmax(h @ p["cls_w"].T + p["cls_b"], -1)
        c = self.word_class[tgt][:, None]
        mx = s.max(-1, keepdim=True).values.detach()
        sums = torch.zeros_like(cls).index_add_(1, self.row_class, torch.exp(s - mx))
        # (a class whose every score is 87 below the row's best would underflow: floored)
        return (s.gather(1, self.word_pos[tgt][:, None]) - mx - torch.log(sums.gather(1, c).clamp_min(1e-30))
                + cls.gather(1, c))[:, 0]

    def forward(self, ctx, tgt, dropout=0.0, input_dropout=0.0, noise=None):
        """Mean loss of the minibatch: NCE with ``noise`` = (ids, log k q of every
        unit), else exact negative log-likelihood."""
        h = self.hidden(ctx, dropout, input_dropout)
        if noise is None:
            return -self.target_log_prob(h, tgt).mean()
        ids, logkq = noise
        p = self.params
        s_t = (h * p["out_w"][tgt]).sum(-1) + p["out_b"][tgt] - logkq[tgt]
        s_n = h @ p["out_w"][ids].T + p["out_b"][ids] - logkq[ids]
        return -(F.logsigmoid(s_t).mean() + F.logsigmoid(-s_n).sum(-1).mean())


@dataclasses.dataclass
class Run:
    """Where a run is: what a checkpoint holds beside the weights."""
    epoch: int = 0
    batch: int = 0            # batches of the current epoch done
    lr: float = 0.0
    halvings: int = 0
    best: float = math.inf
    history: list = dataclasses.field(default_factory=list)


class TorchTrainer:
    """One process's part of a (possibly distributed) run."""

    def __init__(self, net, tc, train_paths, valid, device, log, examples_per_epoch):
        self.net, self.tc, self.paths, self.valid, self.log = net, tc, train_paths, valid, log
        self.device = torch.device(device)
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        torch.manual_seed(tc.seed * 1009 + self.rank)
        self.model = TorchNet(net).to(self.device)
        self.ddp = (torch.nn.parallel.DistributedDataParallel(self.model) if self.world > 1 else self.model)
        params = list(self.model.params.values())
        self.opt = (torch.optim.Adagrad(params, lr=tc.learning_rate, weight_decay=tc.l2)
                    if tc.optimizer == "adagrad" else torch.optim.SGD(params, lr=tc.learning_rate, weight_decay=tc.l2))
        self.ema = [p.detach().clone() for p in params] if tc.average > 0 else None
        self.best = None
        self.run = Run(lr=tc.learning_rate)
        self.per_epoch = examples_per_epoch
        self.gen = None          # variable history and noise draws of the epoch
        self.noise = None
        if net.config.objective == "nce" and net.config.output == "softmax":
            w = torch.from_numpy(noise_weights(net))
            q = w / w.sum()
            self.noise = (q.to(self.device), torch.log(net.config.noise_samples * q).float().to(self.device))

    # -- weights
    def weights(self):
        return self.ema if self.ema is not None else [p.detach() for p in self.model.params.values()]

    def _set(self, tensors, into):
        with torch.no_grad():
            for t, s in zip(into, tensors):
                t.copy_(s)

    def to_net(self, tensors=None):
        """A NeuralNet of ``tensors`` (default: the evaluated weights)."""
        n = self.net
        p = dict(n.params)
        for name, t in zip(self.model.params.keys(), tensors or self.weights()):
            p[name] = np.ascontiguousarray(t.detach().cpu().numpy(), np.float32)
        return NeuralNet(n.config, n.vocab, p, n.structs)

    # -- one epoch
    def batches(self, limit):
        per_rank = self.tc.minibatch // self.world
        return torch_data.batches(self.paths, self.net.vocab, self.net.config.order, per_rank, rank=self.rank,
                                  world=self.world, seed=self.tc.seed, epoch=self.run.epoch, skip=self.run.batch,
                                  limit=limit)

    def step(self, ctx, tgt, gen):
        c = self.net.config
        ctx = torch.from_numpy(ctx).long().to(self.device)
        tgt = torch.from_numpy(tgt).long().to(self.device)
        if c.variable_history and ctx.shape[1] > 1:
            m = ctx.shape[1]
            keep = torch.where(torch.rand(ctx.shape[0], generator=gen) < c.full_history, m,
                               torch.randint(1, m, (ctx.shape[0],), generator=gen)).to(self.device)
            ctx = torch.where(torch.arange(m, device=self.device)[None, :] < (m - keep)[:, None], NULL, ctx)
        noise = None
        if self.noise is not None:
            ids = torch.multinomial(self.noise[0], c.noise_samples, replacement=True, generator=gen)
            noise = (ids.to(self.device), self.noise[1])
        for g in self.opt.param_groups:
            g["lr"] = self.run.lr
        self.opt.zero_grad(set_to_none=True)
        loss = self.ddp(ctx, tgt, self.tc.dropout, self.tc.input_dropout, noise)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def epoch(self, batches_per_epoch, deadline, checkpoint, every):
        """Train the rest of the epoch (a resumed run: from its batch on), writing the
        checkpoint every ``every`` seconds; (mean loss, examples/s, cut by the deadline)."""
        if self.run.batch == 0 or self.gen is None:
            self.gen = torch.Generator().manual_seed(self.tc.seed * 7919 + self.run.epoch * 131 + self.rank)
        alpha = min(1.0, EMA_EVERY * self.tc.minibatch / (self.tc.average * self.per_epoch)) if self.ema else 0
        total, n, t0, cut, saved = 0.0, 0, time.time(), False, time.time()
        self.model.train()
        for ctx, tgt in self.batches(batches_per_epoch):
            total += self.step(ctx, tgt, self.gen)
            n += 1
            self.run.batch += 1
            if self.ema is not None and self.run.batch % EMA_EVERY == 0:
                with torch.no_grad():
                    for e, p in zip(self.ema, self.model.params.values()):
                        e.add_(p.detach() - e, alpha=alpha)
            if deadline is not None and self._agree(time.time() > deadline):
                cut = True
                break
            if self._agree(time.time() - saved >= every) and self.run.batch < batches_per_epoch:
                self.save_checkpoint(checkpoint)
                saved = time.time()
        speed = n * self.tc.minibatch / max(time.time() - t0, 1e-9)
        return total / max(n, 1), speed, cut

    def _agree(self, flag):
        """Whether any rank says ``flag`` (every rank stops together)."""
        if self.world == 1:
            return flag
        t = torch.tensor([1.0 if flag else 0.0])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    # -- evaluation
    @torch.no_grad()
    def perplexity(self, tensors=None):
        if self.valid is None:
            return math.nan
        self.model.eval()
        saved = [p.detach().clone() for p in self.model.params.values()]
        self._set(tensors or self.weights(), self.model.params.values())
        ctx, tgt = self.valid
        nll = 0.0
        for lo in range(0, tgt.size, 4096):
            c = torch.from_numpy(ctx[lo:lo + 4096]).long().to(self.device)
            t = torch.from_numpy(tgt[lo:lo + 4096]).long().to(self.device)
            nll -= float(self.model.target_log_prob(self.model.hidden(c), t).double().sum())
        self._set(saved, self.model.params.values())
        return math.exp(nll / max(tgt.size, 1))

    # -- checkpoints
    def save_checkpoint(self, path):
        if self.rank != 0:
            return
        state = {"run": dataclasses.asdict(self.run), "model": self.model.state_dict(),
                 "opt": self.opt.state_dict(), "ema": self.ema, "best": self.best,
                 "gen": None if self.gen is None else self.gen.get_state(), "rng": torch.get_rng_state(),
                 "config": dataclasses.asdict(self.net.config), "words": self.net.vocab.words,
                 "counts": self.net.vocab.counts, "structs": self.net.structs}
        with atomic_write(path) as f:
            torch.save(state, f)

    def load_checkpoint(self, path):
        state = torch.load(path, map_location=self.device, weights_only=False)
        if state["words"] != self.net.vocab.words or state["config"] != dataclasses.asdict(self.net.config):
            raise FormatError("the checkpoint was made with another configuration or vocabulary", path)
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.ema, self.best = state["ema"], state["best"]
        self.run = Run(**state["run"])
        if state["gen"] is not None:
            self.gen = torch.Generator()
            self.gen.set_state(state["gen"])
        torch.set_rng_state(state["rng"])


def read_checkpoint_net(path, config):
    """The NeuralNet (vocabulary, classes, initial shapes) a checkpoint was made with."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    vocab = Vocabulary(state["words"], np.asarray(state["counts"]))
    return NeuralNet.create(config, vocab, word_class=state["structs"].get("word_class")
                            if config.output == "class" else None, seed=1)


def _gather_counts(counter, examples_n):
    """Every rank's word counts and example counts, summed (all ranks get the same
    vocabulary), and the fewest examples a rank holds (the epoch's batches)."""
    if not dist.is_initialized():
        return counter, examples_n, examples_n
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, (counter, examples_n))
    total = parts[0][0]
    for c, _ in parts[1:]:
        total.update(c)
    sizes = [n for _, n in parts]
    return total, sum(sizes), min(sizes)


def train_torch(train_paths, valid_path, out_path, config, tc, *, device="cpu", resume=False, log=print,
                checkpoint_every=600.0):
    """Train with PyTorch and write ``out_path`` (nplm's model file); the NeuralNet.

    Launched by ``torchrun`` (WORLD_SIZE > 1) each process joins the process group
    (NCCL on CUDA, gloo on the CPU), reads its share of the lines and trains its
    ``minibatch / world`` examples of every global minibatch; rank 0 writes.  The
    checkpoint ``out_path + '.torch.ckpt'`` is written after every epoch and every
    ``checkpoint_every`` seconds within one; ``resume`` continues from it, mid-epoch
    at the minibatch it had reached (the epoch's order is a function of the seed)."""
    if isinstance(train_paths, (str, os.PathLike)):
        train_paths = [train_paths]
    train_paths = [os.fspath(p) for p in train_paths]
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda: torch sees no CUDA device here")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if device.startswith("cuda"):
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            device = f"cuda:{torch.cuda.current_device()}"
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    world = dist.get_world_size() if dist.is_initialized() else 1
    if tc.minibatch % world:
        raise ValueError(f"--minibatch {tc.minibatch} must divide into the {world} processes' shares")
    torch.set_num_threads(tc.threads)
    rank = dist.get_rank() if dist.is_initialized() else 0
    say = log if rank == 0 else (lambda s: None)
    counter, _, tokens = torch_data.count(train_paths, rank, world)
    counter, examples_all, examples_min = _gather_counts(counter, tokens)
    vocab = Vocabulary.build(counter, min_count=tc.min_count, max_size=tc.vocab_size or None)
    if len(vocab) - 4 < 2:
        raise FormatError("the training text has fewer than two distinct words in the vocabulary", train_paths[0])
    valid = None
    if valid_path is not None:
        valid = torch_data.examples(list(torch_data.lines([valid_path])), vocab, config.order)
    say(f"vocabulary: {len(vocab)} words; {examples_all:,} training examples in {len(train_paths)} file(s), "
        f"{world} process(es) on {device}" + (f", {valid[1].size:,} validation" if valid is not None else ""))
    targets = torch_data.first_targets(train_paths, vocab, config.order, CLUSTER_TOKENS)
    wc, _ = output_structures(config, vocab, targets, tc.seed, say)
    net = NeuralNet.create(config, vocab, word_class=wc, seed=tc.seed)
    trainer = TorchTrainer(net, tc, train_paths, valid, device, say, examples_all)
    ckpt = os.fspath(out_path) + ".torch.ckpt"
    if resume:
        if not os.path.exists(ckpt):
            raise FileNotFoundError(f"--resume: no checkpoint {ckpt}")
        trainer.load_checkpoint(ckpt)
        say(f"resuming in epoch {trainer.run.epoch + 1} after {trainer.run.batch:,} minibatches")
    _epochs(trainer, tc, examples_min // (tc.minibatch // world), ckpt, say, checkpoint_every)
    final = trainer.to_net(trainer.best)
    if rank == 0:
        final.save(out_path, extra_config={"training": {"engine": "torch", "history": trainer.run.history,
                                                        "processes": world, "device": device}})
        say(f"saved {os.fspath(out_path)}" + (f"; validation perplexity {trainer.run.best:.2f}"
                                              if valid is not None else ""))
    if dist.is_initialized():
        dist.barrier()
    return final


def _epochs(trainer, tc, batches_per_epoch, ckpt, say, every):
    run = trainer.run
    deadline = time.time() + tc.time_limit if tc.time_limit else None
    while run.epoch < tc.epochs:
        loss, speed, cut = trainer.epoch(batches_per_epoch, deadline, ckpt, every)
        ppl = trainer.perplexity()
        note = ""
        if trainer.valid is None or ppl < run.best:
            run.best = ppl
            trainer.best = [t.detach().clone() for t in trainer.weights()]
        else:
            trainer._set(trainer.best, trainer.model.params.values())
            if trainer.ema is not None:
                trainer._set(trainer.best, trainer.ema)
            run.lr /= 2
            run.halvings += 1
            note = f" (worse: back to best, learning rate halved to {run.lr:.3g})"
        run.history.append({"epoch": run.epoch, "loss": loss, "valid_ppl": ppl, "lr": run.lr})
        valid = f", valid ppl {ppl:.2f}" if trainer.valid is not None else ""
        say(f"epoch {run.epoch + 1}: train loss {loss:.4f}{valid}, {speed * trainer.world:,.0f} examples/s{note}")
        run.epoch += 1
        run.batch = 0
        trainer.gen = None
        trainer.save_checkpoint(ckpt)
        if run.halvings > tc.max_halvings:
            say("stopping early: validation perplexity stopped improving")
            break
        if cut:
            say("stopping: time limit reached")
            break
