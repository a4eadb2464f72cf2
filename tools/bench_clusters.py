"""Benchmark word clustering on PTB train.

Times Brown (exchange) clustering into 100 and 200 classes and reports the class
bigram model it gives (average mutual information of adjacent classes, perplexity of
p(w_i|w_{i-1}) = p(c_i|c_{i-1}) p(w_i|c_i) on the training text) next to frequency
binning, the reference it must beat; also times huffman_tree on the same counts.

    python tools/bench_clusters.py [--classes 100 200] [--corpus PATH] [--repeat 3]

The development VM has 2 vCPUs shared with other work, so take the best of a few runs.
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nplm.neural.clusters import brown_clusters, class_bigram_stats, frequency_bins, huffman_tree  # noqa: E402

TARGET_SECONDS = 60.0   # "about a minute" for a 10k vocabulary and 100-200 classes


def read_corpus(path):
    """Token ids with </s> (id 0) after every line."""
    vocab, ids = {"</s>": 0}, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            ids.extend(vocab.setdefault(w, len(vocab)) for w in line.split())
            ids.append(0)
    return np.array(ids, dtype=np.int32), len(vocab)


def best_time(fn, repeat):
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def main():
    default = Path(__file__).resolve().parents[2] / "shared" / "data" / "ptb" / "ptb.train.txt"
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=str(default))
    ap.add_argument("--classes", type=int, nargs="+", default=[100, 200])
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    ids, V = read_corpus(args.corpus)
    counts = np.bincount(ids, minlength=V)
    print(f"corpus {args.corpus}: {ids.size} tokens, vocabulary {V}; best of {args.repeat} runs")
    header = (f"{'classes':>7} {'method':<26} {'seconds':>8} {'vs 60 s':>8} {'passes':>6} "
              f"{'AMI bits':>9} {'class-bigram ppl':>16} {'ppl / bins':>10}")
    print(header)
    print("-" * len(header))
    for C in args.classes:
        t_bins, bins = best_time(lambda: frequency_bins(counts, C), args.repeat)
        ref = class_bigram_stats(ids, bins)
        print(f"{C:>7} {'frequency bins (sqrt)':<26} {t_bins:>8.3f} {'':>8} {'':>6} "
              f"{ref['mutual_info']:>9.4f} {ref['perplexity']:>16.2f} {1.0:>10.3f}")
        for init in ("roundrobin", "bins"):
            passes = []
            seconds, wc = best_time(
                lambda: (passes.clear(), brown_clusters(
                    ids, V, C, iterations=args.iterations, init=init,
                    callback=lambda it, moves, ll: passes.append(moves)))[1], args.repeat)
            st = class_bigram_stats(ids, wc)
            print(f"{C:>7} {'exchange, ' + init + ' init':<26} {seconds:>8.2f} "
                  f"{seconds / TARGET_SECONDS:>8.3f} {len(passes):>6} {st['mutual_info']:>9.4f} "
                  f"{st['perplexity']:>16.2f} {st['perplexity'] / ref['perplexity']:>10.3f}")
    seconds, tree = best_time(lambda: huffman_tree(counts), args.repeat)
    big = np.tile(counts, 10)
    seconds_big, tree_big = best_time(lambda: huffman_tree(big), args.repeat)
    print(f"\nhuffman_tree: {V} words {seconds:.3f} s (max depth {tree.max_length}); "
          f"{big.size} words {seconds_big:.3f} s (max depth {tree_big.max_length})")


if __name__ == "__main__":
    main()
