"""Commands that use several models together on other tools' output: ``nplm rescore``
(n-best lists) and ``nplm ensemble`` (networks combined linearly).  ``main``
registers them; argument parsing only, the work is in ``nplm.compose``."""
import argparse
import os
import sys

from nplm.compose.ensemble import ensemble, train_ensemble
from nplm.compose.rescore import rescore
from nplm.io.atomic import same_file


def _existing(value):
    if value != "-" and (not os.path.exists(value) or os.path.isdir(value)):
        raise argparse.ArgumentTypeError(f"no such file: {value!r}" if not os.path.exists(value)
                                         else f"not a file: {value!r}")
    return value


class Rescore:
    HELP = ("Add a language-model feature per model to every hypothesis of an n-best list "
            "(Moses or tab-separated); with --weights, write each sentence's new best hypothesis")
    OUTPUTS = ("out", "nbest_out")

    @staticmethod
    def add_arguments(p):
        p.add_argument("models", nargs="+", metavar="MODEL",
                       help="any model: ARPA, KenLM binary, nplm back-off or neural binary, interpolation spec")
        p.add_argument("--nbest", default="-", type=_existing,
                       help="the n-best list (default stdin; may be compressed): Moses 'id ||| "
                            "hypothesis ||| features ||| total' or 'id<TAB>hypothesis[<TAB>score]...'")
        p.add_argument("-o", "--out", default="-",
                       help="output (default stdout): the list with the features added, or with "
                            "--weights the best hypothesis of each sentence, one a line")
        p.add_argument("--name", action="append", metavar="NAME",
                       help="the feature name of each model, in order (default LM0, LM1, ...)")
        p.add_argument("--base", choices=["10", "e"], default="10",
                       help="log base of the features: 10 (default, as kenlm) or e")
        p.add_argument("--format", choices=["auto", "moses", "plain"], default="auto",
                       help="list format (default: Moses when the first line has '|||')")
        p.add_argument("--weights", metavar="W",
                       help="re-rank: 'NAME= w ... NAME2= w' (a Moses list), numbers one per feature "
                            "value in line order (the list's, then the added ones), or a file of "
                            "such lines (a moses.ini [weight] section)")
        p.add_argument("--nbest-out", metavar="FILE",
                       help="with --weights: also write the list with the features added here")
        p.add_argument("--normalization", choices=["exact", "class", "tree", "unnormalized", "fallback"],
                       help="neural models: how probabilities are normalised")
        p.add_argument("--batch", type=int, default=4096,
                       help="about this many lines are read and scored at a time (default 4096)")
        p.add_argument("--threads", type=int, help="threads scoring sentences in parallel (default 1)")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")

    @staticmethod
    def run(args):
        for path in (args.out, args.nbest_out):
            if path not in (None, "-") and args.nbest != "-" and os.path.exists(path) \
                    and same_file(path, args.nbest):
                raise ValueError(f"refusing to overwrite the n-best list {args.nbest}")
        if args.nbest_out is not None and args.weights is None:
            raise ValueError("--nbest-out goes with --weights (without them -o receives the list)")
        result = rescore(args.nbest, args.models, args.out, names=args.name, base=args.base,
                         fmt=args.format, weights=args.weights, nbest_out=args.nbest_out,
                         normalization=args.normalization, batch=args.batch, threads=args.threads,
                         progress=False if args.quiet else None)
        if not args.quiet:
            print(f"rescored {result.hypotheses} hypotheses of {result.sentences} sentences "
                  f"({result.format} list)", file=sys.stderr)
        return 0


class Ensemble:
    HELP = ("Combine networks (or any normalised models) linearly, weights tuned by EM on a "
            "validation text; write a spec that nplm.Model loads")
    OUTPUTS = ("out",)

    @staticmethod
    def add_arguments(p):
        p.add_argument("models", nargs="+", metavar="MODEL", help="the members (at least two)")
        p.add_argument("--tune", metavar="VALID", type=_existing,
                       help="tune the weights on this text (one sentence per line)")
        p.add_argument("--weight", action="append", type=float, metavar="W",
                       help="without --tune: each member's weight (repeat; default uniform)")
        p.add_argument("-o", "--out", required=True, help="write the JSON spec here")

    @staticmethod
    def run(args):
        for m in args.models:
            if os.path.exists(args.out) and same_file(m, args.out):
                raise ValueError(f"refusing to overwrite the model {m}")
        if args.weight is not None and args.tune:
            raise ValueError("--weight and --tune: give one (tuning sets the weights)")
        if args.weight is not None and len(args.weight) != len(args.models):
            raise ValueError(f"{len(args.weight)} --weight for {len(args.models)} models")
        _, report = ensemble(args.models, dev=args.tune, weights=args.weight, out=args.out)
        if report is not None:
            members = ", ".join(f"{p:.3f}" for p in report["members_dev_perplexity"])
            weights = " ".join(f"{w:.4g}" for w in report["weights"])
            print(f"weights {weights}: dev perplexity {report['dev_perplexity']:.3f} "
                  f"(members: {members})", file=sys.stderr)
        return 0


def train_members(args, config, tconfig):
    """``nplm train --ensemble K``: the members, then their tuned ensemble in --out."""
    _, report = train_ensemble(args.train, args.valid, args.out, args.ensemble, config, tconfig,
                               resume=args.resume, log=lambda s: print(s, file=sys.stderr),
                               progress=not args.quiet)
    print(f"ensemble weights {' '.join(f'{w:.4g}' for w in report['weights'])}: validation "
          f"perplexity {report['dev_perplexity']:.3f} (members: "
          f"{', '.join(f'{p:.3f}' for p in report['members_dev_perplexity'])})", file=sys.stderr)
    return 0
