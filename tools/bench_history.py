"""How well trained networks predict after shorter histories: PTB perplexity of each
network with its context cut to the last k words (the rest <null>, as variable-history
training and distillation's lower orders use it), for k = 1 .. order-1, on valid,
and at the full context on test; with --backoff, also the test perplexity of the
network's linear mixture with that model, tuned on valid.

    nplm train --train train.txt --valid valid.txt --out a.nplm --no-variable-history
    nplm train --train train.txt --valid valid.txt --out b.nplm --full-history 0.75
    python tools/bench_history.py a.nplm b.nplm --backoff kn5.nplm

The texts are PTB's with <unk> written as UNK (as the networks and KN5 of the other
benchmarks are trained); each network is scored on one thread.
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_common import ptb_lines  # noqa: E402


def cut_perplexities(net, lines):
    """Perplexity of ``net`` on ``lines`` with every context cut to its last k words."""
    from nplm.neural.vocab import NULL, examples
    ctx, tgt = examples([line.split() for line in lines], net.vocab, net.order)
    m = ctx.shape[1]
    out = []
    for k in range(1, m + 1):
        cut = ctx.copy()
        cut[:, :m - k] = NULL
        out.append(net.perplexity(cut, tgt, threads=1))
    return out


def mixture_perplexity(backoff, path, valid, test):
    from nplm import interpolate
    from nplm.evaluate import evaluate
    mix = interpolate([backoff, path], mode="linear")
    mix.tune(valid)
    return evaluate(mix, test).perplexity


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("networks", nargs="+", help="nplm neural models trained on PTB")
    p.add_argument("--backoff", help="a back-off model of PTB train to mix each network with")
    args = p.parse_args()
    from nplm import Model
    from nplm.evaluate import evaluate
    from nplm.neural.network import NeuralNet
    valid, test = ptb_lines("valid"), ptb_lines("test")
    print("| network | variable history | full share | test | valid after 1 .. n-1 words | mixture test |")
    print("|---|---|---:|---:|---|---:|")
    for path in args.networks:
        net = NeuralNet.load(path)
        c = net.config
        cut = " / ".join(f"{x:.1f}" for x in cut_perplexities(net, valid))
        full = evaluate(Model(path), test).perplexity
        mix = f"{mixture_perplexity(args.backoff, path, valid, test):.2f}" if args.backoff else "-"
        share = f"{c.full_history:.2f}" if c.variable_history else "-"
        print(f"| {Path(path).name} | {c.variable_history} | {share} | {full:.2f} | {cut} | {mix} |", flush=True)


if __name__ == "__main__":
    main()
