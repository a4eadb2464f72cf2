"""Neural query speed per normalisation mode, through the kenlm API.

For each model (trained ones via --model, else randomly initialised networks of the
benchmark shapes: (a) Vaswani et al. 5-gram 150-d embeddings, hidden 750+150,
softmax output; (b) Baltescu & Blunsom diagonal contexts, class output): load time,
resident memory, microseconds per BaseScore in a decoder-like loop over PTB test,
full_scores and batch throughput (tokens/s), and fallback table sizes.
Reference: Vaswani et al. report about 40 us per unnormalised n-gram lookup.
The README's "(a) trained" is (a)'s shape trained for 10 epochs by
    nplm train --train ptb.train.txt --valid ptb.valid.txt --out a.nplm --context full
      --embedding-dim 150 --hidden 750,150 --output softmax --objective nce
      --noise-samples 100 --minibatch 1000 --learning-rate 0.05 --optimizer adagrad --epochs 10
and its "(b) trained" is Baltescu & Blunsom's own size (150-d diagonal contexts, Brown
classes, class NCE; the other settings nplm's defaults) trained for 10 epochs by
    nplm train --train ptb.train.txt --valid ptb.valid.txt --out b.nplm --embedding-dim 150 --epochs 10

With --float16 each model's float16 conversion (nplm convert --to float16) is timed
too: exact class mode then reads float16 copies of the output weights, the same scores
from half the bytes.

    python tools/bench_neural_query.py [--model PATH ...] [--tokens N] [--float16]
"""
import argparse
import os
import sys
import time

import numpy as np
from _bench_common import CACHE, PTB, best_time, rss_mib_of

import nplm
from nplm.neural.query import precompute, sentence_items


def random_model(shape, path):
    from nplm.neural.clusters import frequency_bins
    from nplm.neural.network import NeuralConfig, NeuralNet
    from nplm.neural.vocab import Vocabulary, count_words, read_sentences
    sents = read_sentences(str(PTB / "ptb.train.txt"))
    vocab = Vocabulary.build(count_words(sents))
    if shape == "a":
        cfg = NeuralConfig(order=5, embedding_dim=150, hidden=(750, 150), context="full", output="softmax",
                           objective="nce", noise_samples=100)
        net = NeuralNet.create(cfg, vocab, seed=1)
    else:
        cfg = NeuralConfig(order=5, embedding_dim=150, hidden=(), context="diagonal", output="class",
                           objective="nce", noise_samples=10, classes=100)
        net = NeuralNet.create(cfg, vocab, word_class=frequency_bins(vocab.counts, 100), seed=1)
    net.save(path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", help="trained neural model(s); default: random (a) and (b)")
    ap.add_argument("--tokens", type=int, default=20000, help="PTB test tokens for the per-call loops")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds of the per-call loops (best kept)")
    ap.add_argument("--float16", action="store_true", help="also each model's float16 conversion")
    args = ap.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    models = args.model or [random_model("a", str(CACHE / "random_a.nplm")),
                            random_model("b", str(CACHE / "random_b.nplm"))]
    if args.float16:
        from nplm.neural.quantized_files import quantize_file
        halves = [str(CACHE / (os.path.splitext(os.path.basename(p))[0] + ".f16.nplm")) for p in models]
        for src, dst in zip(models, halves):
            quantize_file(src, dst, "float16")
        models = [p for pair in zip(models, halves) for p in pair]
    lines = (PTB / "ptb.test.txt").read_text().splitlines()
    total = sum(len(l.split()) + 1 for l in lines)
    sub, n = [], 0
    for l in lines:
        sub.append(l.split())
        n += len(sub[-1]) + 1
        if n >= args.tokens:
            break
    print(f"text: ptb.test.txt ({total} tokens; per-call loops over the first {n})")
    print(f"{'model':<22} {'mode':<13} {'BaseScore us':>12} {'(cached ctx)':>12} {'full_scores tok/s':>18} "
          f"{'batch tok/s':>12} {'RSS MiB':>8}")
    for path in models:
        modes = ["exact", "unnormalized"]
        probe = nplm.Model(path)
        if probe.normalization == "exact":
            fb = str(CACHE / (os.path.basename(path) + ".fallback.nplm"))
            if not os.path.exists(fb):
                t0 = time.perf_counter()
                sizes = precompute(path, str(PTB / "ptb.train.txt"), 2, out=fb, progress=False)
                print(f"  precompute (min count 2): {time.perf_counter() - t0:.1f} s, contexts per order "
                      f"{sizes}, table file +{(os.path.getsize(fb) - os.path.getsize(path)) / 2**20:.1f} MiB")
            modes.append("fallback")
        sub_text = [" ".join(l) for l in sub]
        paths = {mode: fb if mode == "fallback" else path for mode in modes}
        # the default normalisation is the best exact mode: the probe serves as "exact"
        loaded = {mode: probe if mode == "exact" else nplm.Model(paths[mode], normalization=mode)
                  for mode in modes}
        # The per-call loops of all modes take turns, round after round, so that each
        # mode's best round comes from the same stretch of this shared machine.
        per_call = {mode: [float("inf"), float("inf")] for mode in modes}
        for _ in range(args.rounds):
            for mode, m in loaded.items():
                per_call[mode][0] = min(per_call[mode][0], basescore_loop(m, sub) / n)
                words = m.vocab.words()[4:4 + n]
                per_call[mode][1] = min(per_call[mode][1], decoder_loop(m, words) / len(words))
        whole = {}
        for mode, m in loaded.items():
            t_fs, _ = best_time(lambda: [list(m.full_scores(l)) for l in sub_text], 3)
            t_b, _ = best_time(lambda: m.score_sentences(lines), 2)
            whole[mode] = (t_fs, t_b)
            rss = rss_mib_of(f"import nplm\nbefore = rss()\nm = nplm.Model({paths[mode]!r}, normalization={mode!r})\n"
                             "m.score('the company said')\nafter = rss()")
            print(f"{os.path.basename(path):<22} {m.normalization:<13} {per_call[mode][0] * 1e6:>12.2f} "
                  f"{per_call[mode][1] * 1e6:>12.2f} {n / t_fs:>18.0f} {total / t_b:>12.0f} {rss:>8.1f}")
        norm = loaded["exact"].normalization
        # the zero-skipping kernels' work scales with the last hidden layer's nonzeros
        ctx = sentence_items(probe._data.net.vocab, probe.order - 1, sub_text)[0]
        print(f"  last hidden layer: {np.mean(probe.core.hidden(ctx) != 0):.0%} of units nonzero on this text")
        print(f"  {norm} / unnormalized time: new-context BaseScore "
              f"{per_call['exact'][0] / per_call['unnormalized'][0]:.2f}x"
              + (" (target: within 3x)" if norm == "class" else "")
              + f", full_scores {whole['exact'][0] / whole['unnormalized'][0]:.2f}x"
              f", batch {whole['exact'][1] / whole['unnormalized'][1]:.2f}x")


def basescore_loop(m, sub):
    """Seconds for a BaseScore loop over running text with every context new."""
    m.core.clear_cache()        # every context new again (a 4096-byte memset)
    s, o = nplm.State(), nplm.State()
    t = time.perf_counter()
    for l in sub:
        m.BeginSentenceWrite(s)
        for w in l:
            m.BaseScore(s, w, o)
            s, o = o, s
        m.BaseScore(s, "</s>", o)
    return time.perf_counter() - t


def decoder_loop(m, words):
    """Seconds for a decoder asking many words after one context: the cache serves them."""
    s, o = nplm.State(), nplm.State()
    m.BeginSentenceWrite(s)
    m.BaseScore(s, "the", o)
    t = time.perf_counter()
    for w in words:
        m.BaseScore(o, w, s)
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
