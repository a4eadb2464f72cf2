"""Training speed and test perplexity of the neural n-gram models on PTB.

    python tools/bench_train.py                      # throughput of (a), (b), (c) + threading modes
    python tools/bench_train.py --epochs 10          # also train each and report exact test perplexity
    python tools/bench_train.py --nets a --epochs 10
    python tools/bench_train.py --engine torch       # Cython vs torch engine, (a) and the default net
    python tools/bench_train.py --engine torch --epochs 1   # also test perplexity of both engines
    python tools/bench_train.py --engine torch --rounds 0 --epochs 2   # perplexity only, no throughput

Perplexity comparison (--engine torch --epochs N): the torch engine against the Cython
engine run as the same algorithm, one thread (synchronous minibatches, as torch's); the
Cython engine with --threads Hogwild threads is trained too and reported apart: its
threads apply updates computed from weights the other threads have since changed, a
different (asynchronous) algorithm.

Networks (all 5-gram, PTB vocabulary of 10k words):
  (a) Vaswani et al. 2013: 150-d embeddings, full contexts, hidden 750 and 150 (ReLU),
      softmax output trained by NCE with k=100.
  (b) Baltescu & Blunsom 2015: diagonal contexts, no hidden layer, class-factored output
      (frequency-binned classes, so the figure does not depend on clustering time),
      class NCE with k=10.
  (c) as (b) but full-softmax maximum likelihood.

References printed as ratios: ISI NPLM (Eigen, 2 threads) trains (a) at 20,000 ex/s as
shipped and 42,700 ex/s with -march=native, test perplexity 193.4 after 10 epochs; the
physical limit of (a) is measured here as this machine's numpy sgemm rate divided by the
FLOPs per example (forward + backward).  For full contexts the bench also prints the
FLOPs nplm actually spends, which multiplies each position's distinct minibatch words
through the context matrix once, and the limit that count gives.
"""
import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nplm.neural.network import NeuralConfig, NeuralNet  # noqa: E402
from nplm.neural.train import Corpus, TrainConfig, Trainer, output_structures, set_blas_threads  # noqa: E402

PTB = Path(__file__).resolve().parents[2] / "shared" / "data" / "ptb"
ISI_SHIPPED, ISI_NATIVE, ISI_PPL = 20000.0, 42700.0, 193.4

NETS = {
    "a": ("Vaswani (a): full ctx, 150-750-150, softmax NCE k=100",
          NeuralConfig(order=5, embedding_dim=150, hidden=(750, 150), context="full", output="softmax",
                       objective="nce", noise_samples=100),
          TrainConfig(minibatch=1000, learning_rate=0.05, optimizer="adagrad", dropout=0.0, input_dropout=0.0)),
    "b": ("B&B (b): diagonal, 150-d, class NCE k=10",
          NeuralConfig(order=5, embedding_dim=150, hidden=(), context="diagonal", output="class",
                       objective="nce", noise_samples=10, clustering="frequency"),
          TrainConfig(minibatch=128, learning_rate=0.05, optimizer="adagrad", dropout=0.0, input_dropout=0.0)),
    "c": ("B&B (c): diagonal, 150-d, full softmax MLE",
          NeuralConfig(order=5, embedding_dim=150, hidden=(), context="diagonal", output="softmax",
                       objective="mle"),
          TrainConfig(minibatch=128, learning_rate=0.05, optimizer="adagrad", dropout=0.0, input_dropout=0.0)),
}


def flops_per_example(cfg, V, distinct=1.0):
    """Multiply-adds x 2, forward + backward (backward = 2x forward) for the dense parts.
    ``distinct``: the share of a minibatch's context words that are distinct at their
    position; the kernel multiplies only those through a full context matrix."""
    m, d = cfg.order - 1, cfg.embedding_dim
    r0, dense = cfg.layer_sizes
    sizes = [r0] + list(dense)
    macs = (m * d * r0 * distinct) if cfg.context == "full" else m * d
    macs += sum(a * b for a, b in zip(sizes, sizes[1:]))
    r = sizes[-1]
    if cfg.output == "softmax":
        macs += r * ((cfg.noise_samples + 1) if cfg.objective == "nce" else V)
    elif cfg.output == "class":
        C = cfg.classes or round(math.sqrt(V))
        macs += r * ((2 * cfg.noise_samples + 2) if cfg.objective == "nce" else C + V / C)
    else:
        macs += r * math.log2(V)
    return 6.0 * macs


def distinct_share(ctx, B, rng, batches=50):
    """Mean share of distinct words per context position in shuffled minibatches of B."""
    shares = []
    for _ in range(batches):
        rows = ctx[rng.choice(len(ctx), B, replace=False)]
        shares.append(np.mean([np.unique(rows[:, j]).size for j in range(rows.shape[1])]) / B)
    return float(np.mean(shares))


def sgemm_gflops(seconds=2.0):
    """numpy float32 matrix product rate on shapes like network (a)'s first layer."""
    a = np.random.rand(1000, 600).astype(np.float32)
    b = np.random.rand(600, 750).astype(np.float32)
    a @ b
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        n += 1
    return 2.0 * 1000 * 600 * 750 * n / (time.perf_counter() - t0) / 1e9


def throughput(net, corpus, tc, batches):
    """Examples/s over ``batches`` minibatches of real PTB data (after a warm-up)."""
    tr = Trainer(net, corpus, tc, log=lambda s: None, progress=False)
    ctx, tgt = corpus.train
    B = tc.minibatch
    n = min(batches * B, tgt.size)
    sub = Corpus.__new__(Corpus)
    sub.vocab, sub.valid = corpus.vocab, None
    sub.train = (ctx[:B * 5], tgt[:B * 5])
    tr.corpus = sub
    tr.train_rows = sub.train            # what run_epoch reads (no shortlist here: ids are rows)
    tr.run_epoch()                       # warm-up
    sub.train = tr.train_rows = (ctx[:n], tgt[:n])
    t0 = time.perf_counter()
    tr.run_epoch()
    return n / (time.perf_counter() - t0)


class _ArrayStream:
    """The torch engine's stream interface over in-memory examples (no shuffling)."""

    def __init__(self, ctx, tgt):
        self.ctx, self.tgt = ctx, tgt

    def batches(self, epoch, size, skip=0):
        for lo in range(skip * size, self.tgt.size, size):
            yield self.ctx[lo:lo + size], self.tgt[lo:lo + size]


def torch_trainer(net, ctx, tgt, tc, valid=None):
    from nplm.neural import torch_engine as te
    dist = te.Dist("cpu")
    import torch
    torch.set_num_threads(tc.threads)
    return te.TorchTrainer(net, _ArrayStream(ctx, tgt), valid, tc, te.TorchOptions(checkpoint_minutes=0), dist,
                           [int(tgt.size)], log=lambda s: print("  " + s), progress=False)


def torch_throughput(net, corpus, tc, batches):
    """Examples/s of the torch engine over ``batches`` minibatches (after a warm-up)."""
    ctx, tgt = corpus.train
    B = tc.minibatch
    tr = torch_trainer(net, ctx[:B * 5], tgt[:B * 5], tc)
    tr.run_epoch(None)
    n = min(batches * B, tgt.size)
    tr = torch_trainer(net, ctx[:n], tgt[:n], tc)
    t0 = time.perf_counter()
    tr.run_epoch(None)
    return n / (time.perf_counter() - t0)


DEFAULT_NET = ("nplm default: diagonal, 1000-d, Brown classes, class NCE k=10", NeuralConfig(), TrainConfig())


def compare_engines(args, corpus, test):
    """Cython engine against torch engine on the same cores: interleaved rounds, best kept
    (``--rounds 0``: no throughput); then, with ``--epochs``, test perplexity of both."""
    import subprocess
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    import torch
    print(f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, CPU {cpu} "
          f"({os.cpu_count()} cores), torch {torch.__version__}, {args.threads} threads, "
          f"{args.rounds} interleaved rounds of {args.batches} minibatches, best kept")
    nets = [v for k, v in (("a", NETS["a"]), ("d", DEFAULT_NET)) if k in args.nets]
    for name, cfg, tc in nets:
        tcx = TrainConfig(**{**tc.__dict__, "threads": args.threads})
        wc, tree = output_structures(cfg, corpus.vocab, corpus.train[1], 1, lambda s: None)
        if args.rounds:
            best = {"cython": 0.0, "torch": 0.0}
            for _ in range(args.rounds):
                for engine, fn in (("cython", throughput), ("torch", torch_throughput)):
                    net = NeuralNet.create(cfg, corpus.vocab, word_class=wc, tree=tree, seed=1)
                    best[engine] = max(best[engine], fn(net, corpus, tcx, args.batches))
            print(f"\n{name} (minibatch {tc.minibatch}):\n  cython {best['cython']:9,.0f} ex/s\n"
                  f"  torch  {best['torch']:9,.0f} ex/s  (torch/cython x{best['torch'] / best['cython']:.2f})")
        else:
            print(f"\n{name} (minibatch {tc.minibatch}):")
        if args.epochs:
            compare_perplexity(args, cfg, tcx, wc, tree, corpus, test)


def compare_perplexity(args, cfg, tc, wc, tree, corpus, test):
    """Both engines, the same network, data, epochs and algorithm: exact PTB test
    perplexity, for each seed of ``args.seeds`` (the seed of the initial weights, the
    example order, the noise and the masks).  The Cython engine runs one thread
    (synchronous minibatches, as the torch engine's; the torch engine has ``tc.threads``
    threads inside each product), then, reported apart, ``tc.threads`` Hogwild threads
    (unless ``--no-hogwild``)."""
    import tempfile

    from nplm.neural import torch_engine as te
    runs = [("cython, 1 thread", "cython", 1), ("torch", "torch", tc.threads)]
    if tc.threads > 1 and args.hogwild:
        runs.append((f"cython, {tc.threads} Hogwild threads", "cython", tc.threads))
    ppl = {label: [] for label, _, _ in runs}
    for seed in args.seeds:
        for label, engine, threads in runs:
            tcx = TrainConfig(**{**tc.__dict__, "epochs": args.epochs, "threads": threads, "seed": seed})
            t0 = time.perf_counter()
            log = (lambda s, tag=f"{label}, seed {seed}": print(f"  [{tag}] {s}", flush=True))
            if engine == "cython":
                structs = (wc, tree)        # clustered with seed 1, as the torch engine clusters with its seed
                if cfg.output == "class" and cfg.clustering == "brown" and seed != 1:
                    structs = output_structures(cfg, corpus.vocab, corpus.train[1], seed, lambda s: None)
                net = NeuralNet.create(cfg, corpus.vocab, word_class=structs[0], tree=structs[1], seed=seed)
                final = Trainer(net, corpus, tcx, log=log, progress=False).train()
            else:       # the whole engine: streamed, shuffled PTB files, as nplm train --engine torch reads them
                with tempfile.TemporaryDirectory() as d:
                    final = te.train([PTB / "ptb.train.txt"], PTB / "ptb.valid.txt", os.path.join(d, "m.nplm"),
                                     cfg, tcx, te.TorchOptions(checkpoint_minutes=0), log=log, progress=False)
            ex = test
            if final.vocab.words != corpus.vocab.words:     # the torch engine counts the words itself
                ex = Corpus(PTB / "ptb.train.txt", PTB / "ptb.test.txt", 5, vocab=final.vocab).valid
            ppl[label].append(final.perplexity(*ex))
            print(f"  {label}, seed {seed}: {args.epochs} epochs in {(time.perf_counter() - t0) / 60:.1f} min, "
                  f"exact test perplexity {ppl[label][-1]:.2f}", flush=True)
    one = ppl["cython, 1 thread"]
    for label, values in ppl.items():
        print(f"  {label}: test perplexity {', '.join(f'{v:.2f}' for v in values)} (seeds "
              f"{', '.join(map(str, args.seeds))}); mean {np.mean(values):.2f}")
    print(f"  torch / cython (1 thread) perplexity ratio, seed by seed: "
          f"{', '.join(f'{t / c:.4f}' for t, c in zip(ppl['torch'], one))}; of the means "
          f"{np.mean(ppl['torch']) / np.mean(one):.4f}")
    if len(runs) > 2:
        hog = ppl[runs[-1][0]]
        print(f"  cython ({tc.threads} Hogwild threads) / cython (1 thread) perplexity ratio, seed by seed: "
              f"{', '.join(f'{h / c:.4f}' for h, c in zip(hog, one))}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nets", default="abc",
                    help="networks: a, b, c; with --engine torch a and d (nplm's default network)")
    ap.add_argument("--batches", type=int, default=200, help="minibatches per throughput measurement")
    ap.add_argument("--epochs", type=int, default=0, help="train this many epochs and report test perplexity")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", choices=["cython", "torch"], default="cython",
                    help="torch: compare the Cython and torch engines on network (a) and nplm's default network")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved throughput rounds per engine (--engine torch; 0: perplexity only)")
    ap.add_argument("--seeds", default="1", help="comma-separated seeds of the perplexity runs (--engine torch)")
    ap.add_argument("--no-hogwild", dest="hogwild", action="store_false",
                    help="perplexity runs: leave out the Cython engine's Hogwild threads")
    args = ap.parse_args()
    args.seeds = [int(x) for x in args.seeds.split(",")]
    if not PTB.is_dir():
        sys.exit(f"PTB not found at {PTB}")
    print(f"load average before start: {os.getloadavg()[0]:.2f} (2-core machine shared with others)")
    set_blas_threads(args.threads)
    if args.engine == "torch":
        if args.nets == "abc":
            args.nets = "ad"
        corpus = Corpus(PTB / "ptb.train.txt", PTB / "ptb.valid.txt", 5)
        test = Corpus(PTB / "ptb.train.txt", PTB / "ptb.test.txt", 5, vocab=corpus.vocab).valid
        compare_engines(args, corpus, test)
        return
    gf = sgemm_gflops()
    print(f"numpy sgemm: {gf:.0f} GFLOP/s")
    corpus = None
    for key in args.nets:
        name, cfg, tc = NETS[key]
        if corpus is None:
            corpus = Corpus(PTB / "ptb.train.txt", PTB / "ptb.valid.txt", 5)
            test = Corpus(PTB / "ptb.train.txt", PTB / "ptb.test.txt", 5, vocab=corpus.vocab).valid
            V = len(corpus.vocab)
        wc, tree = output_structures(cfg, corpus.vocab, corpus.train[1], 1, lambda s: None)
        fl = flops_per_example(cfg, V)
        limit = gf * 1e9 / fl
        print(f"\n{name}: {fl / 1e6:.2f} MFLOP/example, sgemm-bound limit {limit:,.0f} ex/s")
        if cfg.context == "full":
            share = distinct_share(corpus.train[0], tc.minibatch, np.random.default_rng(0))
            flg = flops_per_example(cfg, V, share)
            limit = gf * 1e9 / flg
            print(f"  distinct context words per position in a minibatch of {tc.minibatch}: {share:.0%}; "
                  f"multiplying each once costs {flg / 1e6:.2f} MFLOP/example: limit {limit:,.0f} ex/s")
        modes = [("1 thread", 1, "hogwild")]
        if args.threads > 1:
            modes += [(f"{args.threads} threads Hogwild", args.threads, "hogwild"),
                      (f"{args.threads} threads BLAS/OpenMP", args.threads, "blas")]
        best = 0
        for label, th, par in modes:
            tcx = TrainConfig(**{**tc.__dict__, "threads": th, "parallel": par})
            net = NeuralNet.create(cfg, corpus.vocab, word_class=wc, tree=tree, seed=1)
            eps = throughput(net, corpus, tcx, args.batches)
            best = max(best, eps)
            line = f"  {label:28s} {eps:9,.0f} ex/s  ({eps / limit:.0%} of limit"
            if key == "a":
                line += f"; x{eps / ISI_SHIPPED:.2f} ISI -O3, x{eps / ISI_NATIVE:.2f} ISI -march=native"
            print(line + ")")
        if args.epochs:
            tcx = TrainConfig(**{**tc.__dict__, "threads": args.threads, "epochs": args.epochs})
            net = NeuralNet.create(cfg, corpus.vocab, word_class=wc, tree=tree, seed=1)
            t0 = time.perf_counter()
            tr = Trainer(net, corpus, tcx, log=lambda s: print("  " + s), progress=False)
            final = tr.train()
            secs = time.perf_counter() - t0
            ppl = final.perplexity(*test)
            line = f"  {args.epochs} epochs in {secs / 60:.1f} min: exact test perplexity {ppl:.1f}"
            if key == "a":
                line += f" (ISI NPLM: {ISI_PPL}, ratio {ppl / ISI_PPL:.2f})"
            print(line)


if __name__ == "__main__":
    main()
