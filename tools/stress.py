"""Bounded soak: mixed queries from several threads against one shared model.

Every thread loops over a random mix of score / full_scores / BaseScore chains /
perplexity / score_sentences / full_scores_batch / vocabulary lookups on test
sentences and checks each answer against the single-threaded answer computed
before the soak.  Reports queries/s, errors (wrong answers or exceptions: must
be 0) and resident-memory growth after warm-up (must be flat), and the ratio of
the threaded rate to single-threaded nplm and to the real kenlm module running
the same mix in one thread (kenlm's score holds the GIL, so more threads do not
help it).

``--mixed`` adds two more model kinds to the soak, each query on a random one: a
small random class-output neural model over the text's words and a linear mixture
of it and the back-off model (a spec).  ``--fork N`` then forks a process pool of N
workers (multiprocessing's default start method on Linux) after the parent ran
its batch kernels in parallel, and soaks the same mix in every worker for the same
time, checking each answer and each worker's RSS; a worker that hangs counts as an
error.

    python tools/stress.py [--seconds 60] [--threads 4] [--mixed] [--fork 2] [--model PATH] [--text PATH]

Default model: the PTB 5-gram KN binary of tools/_bench_common (built and cached
on first use) when ../shared is present, else examples/toy.arpa; text: PTB test.
Exit status 1 when there were errors or the RSS grew.
"""
import argparse
import json
import multiprocessing
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import nplm  # noqa: E402

RSS_FLAT_BYTES = 8 << 20   # growth allowed after warm-up (allocator noise)


def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def default_inputs():
    from _bench_common import CACHE, PTB, kn_arpa, ptb_lines
    if PTB.is_dir():
        arpa = kn_arpa(5)
        binary = CACHE / "ptb.o5.nplm"
        if not binary.exists():
            nplm.build_binary(str(arpa), str(binary))
        return str(arpa), str(binary), ptb_lines("test")
    toy = ROOT / "examples" / "toy.arpa"
    tmp = Path(tempfile.mkdtemp()) / "toy.nplm"
    nplm.build_binary(str(toy), str(tmp))
    return str(toy), str(tmp), (ROOT / "examples" / "toy.txt").read_text().splitlines()


OPS = ("score", "full_scores", "basescore", "perplexity", "batch", "full_batch", "vocab")


def answer(model, state_cls, op, item):
    """One query of kind ``op``: (number of queries it counts for, comparable result)."""
    if op == "score":
        return 1, model.score(item)
    if op == "full_scores":
        return 1, tuple(tuple(r) for r in model.full_scores(item))
    if op == "perplexity":
        return 1, model.perplexity(item)
    if op == "basescore":
        a, b = state_cls(), state_cls()
        model.BeginSentenceWrite(a)
        total = 0.0
        for w in item.split():
            total += model.BaseScore(a, w, b)
            a, b = b, a
        return 1, total
    if op == "vocab":
        return 1, tuple(w in model for w in item.split())
    if op == "batch":
        return len(item), tuple(model.score_sentences(list(item)))
    if op == "full_batch":
        p, l, o, off = model.full_scores_batch(list(item))
        return len(item), (p.tobytes(), l.tobytes(), o.tobytes(), off.tobytes())
    raise ValueError(op)


def workload(lines, ops=OPS, seed=0, n=4000):
    rng = random.Random(seed)
    items = []
    for _ in range(n):
        op = rng.choice(ops)
        if op in ("batch", "full_batch"):
            start = rng.randrange(len(lines))
            items.append((op, tuple(lines[start:start + 32])))
        else:
            items.append((op, rng.choice(lines)))
    return items


def mixed_models(backoff_path, lines, directory):
    """A small random class-output neural model over the text's most frequent words
    and a linear mixture of it with the back-off model: (neural path, spec path)."""
    from collections import Counter

    from nplm.neural.clusters import frequency_bins
    from nplm.neural.network import NeuralConfig, NeuralNet
    from nplm.neural.vocab import SPECIALS, Vocabulary
    counts = Counter(w for line in lines for w in line.split() if w not in SPECIALS)
    top = counts.most_common(3000)
    words = list(SPECIALS) + [w for w, _ in top]
    freq = np.array([1] * len(SPECIALS) + [c for _, c in top], np.int64)
    cfg = NeuralConfig(order=4, embedding_dim=32, hidden=(64,), context="full", output="class",
                       objective="mle", classes=40, activation="relu")
    net = NeuralNet.create(cfg, Vocabulary(words, freq), word_class=frequency_bins(freq, 40), seed=1)
    rng = np.random.default_rng(2)
    for v in net.params.values():
        if v.size:
            v[...] = rng.normal(0, 0.3, v.shape).astype(np.float32)
    neural = os.path.join(directory, "stress-neural.nplm")
    net.save(neural)
    spec = os.path.join(directory, "stress-mix.json")
    with open(spec, "w") as f:
        json.dump({"nplm": "interpolation", "version": 1, "mode": "linear",
                   "models": [os.path.abspath(backoff_path), neural], "weights": [0.7, 0.3]}, f)
    return neural, spec


def check_some(models, items, expected, rng, label, errors):
    """Answer 200 random (model, query) pairs and compare; returns the query count."""
    done = 0
    for _ in range(200):
        k = rng.randrange(len(models))
        i = rng.randrange(len(items))
        op, item = items[i]
        try:
            n, got = answer(models[k], nplm.State, op, item)
            if got != expected[k][i]:
                errors.append(f"{label}: model {k} {op} answer differs from the single-threaded one")
        except Exception as e:  # noqa: BLE001 - every failure is counted
            errors.append(f"{label}: model {k} {op}: {type(e).__name__}: {e}")
            n = 1
        done += n
    return done


def soak(models, items, expected, threads, seconds):
    stop = time.monotonic() + seconds
    counts = [0] * threads
    errors = []
    samples = []

    def work(k):
        rng = random.Random(k)
        while time.monotonic() < stop:
            counts[k] += check_some(models, items, expected, rng, f"thread {k}", errors)

    pool = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(threads)]
    t0 = time.monotonic()
    for t in pool:
        t.start()
    while any(t.is_alive() for t in pool):
        samples.append((time.monotonic() - t0, rss()))
        time.sleep(0.5)
    elapsed = time.monotonic() - t0
    return sum(counts) / elapsed, errors, samples


_FORKED = None      # what the pool's workers inherit: (models, items, expected, seconds)


def _fork_worker(k):
    models, items, expected, seconds = _FORKED
    rng, errors, done = random.Random(1000 + k), [], 0
    t0 = time.monotonic()
    samples = []
    while time.monotonic() - t0 < seconds:
        done += check_some(models, items, expected, rng, f"worker {k}", errors)
        samples.append((time.monotonic() - t0, rss()))
    return done, errors, samples


def fork_soak(models, items, expected, workers, seconds):
    """The mix in a forked pool of ``workers``: (queries/s, errors, per-worker RSS samples)."""
    global _FORKED
    for m in models:    # parallel kernels in this thread right before the fork
        m.score_sentences([it for op, it in items if op not in ("batch", "full_batch")][:256], threads=2)
    _FORKED = (models, items, expected, seconds)
    t0 = time.monotonic()
    pool = multiprocessing.get_context("fork").Pool(workers)
    try:
        results = pool.map_async(_fork_worker, range(workers)).get(timeout=seconds + 120)
    except multiprocessing.TimeoutError:
        return 0.0, [f"the forked pool did not finish in {seconds + 120:g} s (a hung worker)"], []
    finally:
        pool.terminate()
        pool.join()
        _FORKED = None
    elapsed = time.monotonic() - t0
    return (sum(r[0] for r in results) / elapsed, [e for r in results for e in r[1]],
            [r[2] for r in results])


def rss_growth(samples, seconds):
    """(RSS after warm-up, its growth) from (time, rss) samples."""
    warm = [r for t, r in samples if t >= min(5.0, seconds * 0.1)] or [samples[-1][1]]
    return warm[0], max(warm) - warm[0]


def rate_single(model, state_cls, items, seconds):
    done, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        for op, item in items[:200]:
            n, _ = answer(model, state_cls, op, item)
            done += n
    return done / (time.monotonic() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--model", help="model to load (ARPA or nplm binary)")
    ap.add_argument("--text", help="query sentences, one per line")
    ap.add_argument("--mixed", action="store_true",
                    help="also soak a random neural model and a mixture of it with the model")
    ap.add_argument("--fork", type=int, default=0, metavar="N",
                    help="then soak the same mix in a forked pool of N processes")
    ap.add_argument("--ops", default=",".join(OPS),
                    help="comma-separated query kinds to mix (default: all); 'batch,full_batch' "
                         "shows the scaling of the kernels that release the GIL")
    args = ap.parse_args()
    ops = tuple(args.ops.split(","))
    if not ops or set(ops) - set(OPS):
        ap.error(f"--ops: choose from {', '.join(OPS)}")

    if args.model:
        arpa_path, model_path = None, args.model
        lines = Path(args.text).read_text().splitlines() if args.text else ["the cat sat on the mat"]
    else:
        arpa_path, model_path, lines = default_inputs()
        if args.text:
            lines = Path(args.text).read_text().splitlines()
    lines = [line for line in lines] + ["", " \t ", "word " * 2000, "<s> </s> <unk>"]

    model = nplm.Model(model_path)
    models = [model]
    if args.mixed:
        models += [nplm.Model(p) for p in mixed_models(model_path, lines, tempfile.mkdtemp())]
    items = workload(lines, ops)
    expected = [[answer(m, nplm.State, op, item)[1] for op, item in items] for m in models]
    print(f"model {model_path} ({os.path.getsize(model_path) / 2**20:.0f} MiB)"
          f"{' + a neural model + their mixture' if args.mixed else ''}, {len(lines)} sentences, "
          f"{len(items)} mixed queries of kinds {', '.join(ops)}")
    print("(machine shared with other jobs: rates are noisy)")

    quick = min(5.0, args.seconds / 6)
    single = rate_single(model, nplm.State, items, quick)      # (the first model's)
    plain = [it for it in items if it[0] not in ("batch", "full_batch")]
    ref = None
    if arpa_path is not None:
        try:
            import kenlm
        except ImportError:
            kenlm = None
        if kenlm is not None:
            # kenlm has no batch calls: compare on the per-sentence part of the mix
            if plain:
                ref = rate_single(kenlm.Model(arpa_path), kenlm.State, plain, quick)
                ours = rate_single(model, nplm.State, plain, quick)

    rate, errors, samples = soak(models, items, expected, args.threads, args.seconds)
    first, growth = rss_growth(samples, args.seconds)
    print(f"full mix, one thread:          {single:12,.0f} queries/s{' (the first model)' if args.mixed else ''}")
    print(f"full mix, {args.threads} threads, {args.seconds:g} s: {rate:12,.0f} queries/s  "
          + (f"(x{rate / single:.2f} of one thread)" if not args.mixed else "(every model)"))
    if ref:
        print(f"per-sentence mix, one thread:  {ours:12,.0f} queries/s nplm, {ref:,.0f} kenlm  "
              f"(nplm/kenlm x{ours / ref:.2f})")
    print(f"errors: {len(errors)}")
    for e in errors[:10]:
        print("  " + e)
    print(f"RSS after warm-up {first / 2**20:.1f} MiB, max {(first + growth) / 2**20:.1f} MiB, "
          f"growth {growth / 2**20:+.2f} MiB ({'flat' if growth <= RSS_FLAT_BYTES else 'GROWING'})")
    bad = bool(errors) or growth > RSS_FLAT_BYTES
    if args.fork:
        frate, ferrors, fsamples = fork_soak(models, items, expected, args.fork, args.seconds)
        print(f"forked pool of {args.fork}, {args.seconds:g} s: {frate:12,.0f} queries/s, errors: {len(ferrors)}")
        for e in ferrors[:10]:
            print("  " + e)
        for k, ws in enumerate(fsamples):
            wfirst, wgrowth = rss_growth(ws, args.seconds)
            print(f"  worker {k}: RSS after warm-up {wfirst / 2**20:.1f} MiB, growth {wgrowth / 2**20:+.2f} MiB "
                  f"({'flat' if wgrowth <= RSS_FLAT_BYTES else 'GROWING'})")
            bad |= wgrowth > RSS_FLAT_BYTES
        bad |= bool(ferrors) or not fsamples
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
