"""Interpolated models on PTB: test perplexity and speed of the components and of
their tuned linear and log-linear mixtures.

Components: a 5-gram Kneser-Ney model estimated by nplm.estimate on ptb.train.txt
(``<unk>`` as is), plus every ``--model`` given (ARPA, nplm binary, neural model);
with no ``--model``, the 3-gram KN model of the same text.  Weights are tuned on
ptb.valid.txt (EM for linear, Newton on the normalised likelihood for
log-linear), perplexities are over ptb.test.txt (tokens + one </s> per line, OOVs
included).  tokens/s is single-threaded Model.score_sentences; the ratio column
compares it with the real kenlm module scoring the KN5 model (score() per line)
in the same run.  Normalised log-linear speed is with a cold Z cache (every new
context sums over the vocabulary; ``--threads`` threads) and warm (the same text
again, one thread).

    python tools/bench_interpolate.py [--model nn.nplm ...] [--max-contexts 3000]
"""
import argparse
import os
import sys
import time

import kenlm
import numpy as np
from _bench_common import CACHE, PTB, ROOT

sys.path.insert(0, str(ROOT))
import nplm  # noqa: E402

PUBLISHED = [("KN5 (Mikolov 2011)", 141.2), ("feed-forward NNLM + KN5 (Mikolov 2011/2012)", 116.7)]
TARGET = 112.0


def kn_model(order):
    """KN model of PTB train, <unk> kept as the unknown word; cached nplm binary."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"ptb.unk.o{order}.nplm"
    arpa = CACHE / f"ptb.unk.o{order}.arpa"
    if not path.exists() or not arpa.exists():
        nplm.estimate(str(PTB / "ptb.train.txt"), order, arpa=str(arpa), binary=str(path),
                      progress=False)
    return str(path)


def lines_of(split, limit=None):
    lines = [l.strip() for l in open(PTB / f"ptb.{split}.txt", encoding="utf-8")]
    lines = [l for l in lines if l]
    return lines[:limit] if limit else lines


def perplexity(model, lines):
    probs, _, _, _ = model.full_scores_batch(lines)
    return 10.0 ** (-probs.astype(np.float64).sum() / len(probs)), len(probs)


def speed(model, lines, tokens):
    t = time.perf_counter()
    model.score_sentences(lines)
    return tokens / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", default=[], help="extra component (repeatable)")
    ap.add_argument("--order", type=int, default=5, help="order of the KN component (default 5)")
    ap.add_argument("--max-contexts", type=int, default=3000,
                    help="log-linear tuning: dev contexts sampled (default 3000)")
    ap.add_argument("--test-lines", type=int, help="score only the first N test lines")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-loglinear", action="store_true")
    ap.add_argument("--loglinear-lines", type=int,
                    help="normalised log-linear: score only the first N test lines (it sums over "
                    "the vocabulary once per new context); the linear mixture is reported on the "
                    "same lines for comparison")
    args = ap.parse_args()

    cfg = nplm.Config()
    cfg.show_progress = False
    cfg.arpa_complain = nplm.ARPALoadComplain.NONE
    paths = [kn_model(args.order)] + (args.model or [kn_model(3)])
    comps = [nplm.Model(p, cfg) for p in paths]
    names = [os.path.basename(p) for p in paths]
    dev = lines_of("valid")
    test = lines_of("test", args.test_lines)
    tokens = sum(len(l.split()) + 1 for l in test)
    print(f"components: {', '.join(names)}; dev ptb.valid ({len(dev)} lines), "
          f"test ptb.test ({len(test)} lines, {tokens} tokens incl. </s>)")
    print("(on a shared machine speeds are noisy)\n")

    # The reference speed: the real kenlm module on the KN ARPA.
    arpa = CACHE / f"ptb.unk.o{args.order}.arpa"
    kc = kenlm.Config()
    kc.show_progress = False
    kc.arpa_complain = kenlm.ARPALoadComplain.NONE
    km = kenlm.Model(str(arpa), kc)
    t = time.perf_counter()
    k_total = sum(km.score(l) for l in test)
    k_speed = tokens / (time.perf_counter() - t)
    rows = [(f"kenlm KN{args.order} (reference)", 10 ** (-k_total / tokens), k_speed, "")]

    for name, m in zip(names, comps):
        rows.append((name, perplexity(m, test)[0], speed(m, test, tokens), ""))

    t = time.perf_counter()
    lin = nplm.interpolate(comps, mode="linear")
    res = lin.tune(dev)
    t_tune = time.perf_counter() - t
    rows.append(("linear, tuned (EM)", perplexity(lin, test)[0], speed(lin, test, tokens),
                 f"w={np.round(res.weights, 4).tolist()} dev {res.perplexity:.2f} tune {t_tune:.1f}s"))

    if not args.skip_loglinear:
        t = time.perf_counter()
        ll = nplm.interpolate(comps, mode="loglinear")
        res = ll.tune(dev, max_contexts=args.max_contexts, threads=args.threads)
        t_tune = time.perf_counter() - t
        sub = test[:args.loglinear_lines] if args.loglinear_lines else test
        sub_tokens = sum(len(l.split()) + 1 for l in sub)
        if len(sub) < len(test):
            rows.append((f"linear, tuned, first {len(sub)} lines", perplexity(lin, sub)[0],
                         speed(lin, sub, sub_tokens), f"{sub_tokens} tokens"))
        t = time.perf_counter()
        total = float(ll.score_sentences(sub, threads=args.threads).sum())
        cold = sub_tokens / (time.perf_counter() - t)
        ppl = 10.0 ** (-total / sub_tokens)
        warm = speed(ll, sub, sub_tokens)
        label = f", first {len(sub)} lines" if len(sub) < len(test) else ""
        rows.append((f"log-linear normalised, tuned{label}", ppl, cold,
                     f"w={np.round(res.weights, 4).tolist()} dev(sampled) {res.perplexity:.2f} "
                     f"tune {t_tune:.1f}s; {args.threads} threads cold, warm cache {warm:,.0f} tok/s; "
                     f"Z misses {ll.core.z_misses}"))
        feat = nplm.interpolate(comps, res.weights, mode="loglinear", normalize=False)
        rows.append(("log-linear unnormalised (decoder features)", float("nan"),
                     speed(feat, test, tokens), "same weights; not a probability"))

    print(f"{'model':48s} {'test ppl':>9s} {'tokens/s':>11s} {'vs kenlm':>8s}  notes")
    for name, ppl, sp, note in rows:
        print(f"{name:48s} {ppl:9.2f} {sp:11,.0f} {sp / k_speed:8.3f}  {note}")
    print()
    for name, value in PUBLISHED:
        print(f"published: {name}: {value}")
    full = [r[1] for r in rows[1 + len(comps):] if np.isfinite(r[1]) and "first" not in r[0]]
    best = min(full)
    scope = "full test set" if not args.test_lines else f"first {args.test_lines} test lines"
    print(f"target: tuned interpolation <= {TARGET}; best here {best:.2f} on the {scope} "
          f"({'met' if best <= TARGET else 'missed'})")


if __name__ == "__main__":
    sys.exit(main())
