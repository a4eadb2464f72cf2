"""Ensemble benchmark on PTB: test perplexity of three small networks that differ only
by their seed, alone, as an EM-tuned linear ensemble (``nplm.compose.ensemble``), and
mixed with KN5.

The networks are the quick ones of ``bench_rescore.py`` (150-d diagonal contexts,
frequency classes, class NCE k=10, ``--epochs`` epochs on 2 threads), seeds 1, 2, 3;
KN5 is lmplz's (or nplm.estimate's) on PTB train.  Weights are tuned by EM on PTB
valid; perplexities are on PTB test (<unk> spelled UNK, as the KN5 reference).
Models are cached in the benchmark cache.  ``--networks`` takes three networks
trained elsewhere instead, e.g. default ones (``nplm train --seed S``).

    python tools/bench_ensemble.py [--epochs 3]
    python tools/bench_ensemble.py --networks d1.nplm d2.nplm d3.nplm
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _bench_common as common  # noqa: E402

import nplm  # noqa: E402
from nplm.compose.ensemble import ensemble  # noqa: E402
from nplm.evaluate import evaluate  # noqa: E402


def network(epochs, seed):
    """The cached quick PTB network of ``seed`` (trained when missing)."""
    path = common.CACHE / f"ptb.quick-nn{epochs}-s{seed}.nplm"
    if not path.exists():
        from nplm.neural.network import NeuralConfig
        from nplm.neural.train import TrainConfig, train
        cfg = NeuralConfig(order=5, embedding_dim=150, hidden=(), context="diagonal", output="class",
                           objective="nce", noise_samples=10, clustering="frequency")
        tc = TrainConfig(epochs=epochs, minibatch=128, learning_rate=0.05, dropout=0.0,
                         input_dropout=0.0, threads=2, seed=seed)
        t = time.perf_counter()
        train(str(common.ptb_train_unk()), str(valid_path()), str(path), cfg, tc, log=lambda s: None,
              progress=False)
        print(f"trained seed {seed} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return str(path)


def valid_path():
    path = common.CACHE / "ptb.valid.UNK.txt"
    if not path.exists():
        path.write_text("\n".join(common.ptb_lines("valid")) + "\n")
    return path


def perplexity(model):
    return evaluate(model, common.ptb_lines("test")).perplexity


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=3, help="epochs of each network (3)")
    p.add_argument("--networks", nargs=3, metavar="NPLM", help="three trained networks to use instead")
    args = p.parse_args()
    members = args.networks or [network(args.epochs, seed) for seed in (1, 2, 3)]
    what = "the given networks" if args.networks else f"{args.epochs}-epoch networks"
    kn5 = common.CACHE / "ptb.o5.nplm"
    if not kn5.exists():
        nplm.build_binary(str(common.kn_arpa(5)), str(kn5))
    valid = str(valid_path())
    rows = []
    for i, m in enumerate(members):
        rows.append((f"network, seed {i + 1}", perplexity(nplm.Model(m)), "-"))
    ens, report = ensemble(members, dev=valid)
    rows.append(("ensemble of the three (EM on valid)", perplexity(ens),
                 " / ".join(f"{w:.3f}" for w in report["weights"])))
    for label, comps in (("KN5 alone", None), ("KN5 + network seed 1", [str(kn5), members[0]]),
                         ("KN5 + the three networks", [str(kn5)] + members)):
        if comps is None:
            rows.append((label, perplexity(nplm.Model(str(kn5))), "-"))
            continue
        mix = nplm.interpolate(comps)
        res = mix.tune(valid)
        rows.append((label, perplexity(mix), " / ".join(f"{w:.3f}" for w in res.weights)))
    print(f"\nPTB test perplexity ({what})\n\n| model | test perplexity | weights |"
          "\n|---|---:|---|")
    for label, ppl, w in rows:
        print(f"| {label} | {ppl:.2f} | {w} |")


if __name__ == "__main__":
    main()
