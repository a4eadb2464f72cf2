"""``nplm prune`` (relative-entropy pruning, SRILM's ``ngram -prune``) and ``nplm mix``
(static linear interpolation, SRILM's ``ngram -mix-lm ... -write-lm``): argument
parsing only; the work is in nplm/compose/prune.py."""
import argparse
import math
import os
import sys

from nplm.backoff.arpa import write_arpa
from nplm.backoff.kenlm import write as kenlm_write
from nplm.cli.common import command
from nplm.compose import prune as lib
from nplm.convert import backoff_tables, detect

OUTPUT_TYPES = ("arpa",) + kenlm_write.TYPES


def _file(value):
    if not os.path.exists(value) or os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"no such file: {value!r}" if not os.path.exists(value)
                                         else f"not a file: {value!r}")
    return value


def _threshold(value):
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not 0 <= x < math.inf:
        raise argparse.ArgumentTypeError(f"expected a relative perplexity increase >= 0, not {value!r}")
    return x


def _size(value):
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of n-grams, not {value!r}")
    return n


def _add_output(p):
    p.add_argument("--type", choices=OUTPUT_TYPES,
                   help="output format: arpa (the default; .gz/.bz2/.xz compressed by extension), KenLM's "
                        "probing or trie binary, or nplm's binary (the default for a name ending in .nplm)")
    p.add_argument("-q", dest="q", nargs="?", const=True, metavar="B",
                   help="alone: no progress on stderr; with B: trie, quantise probabilities to B bits")
    p.add_argument("--quiet", action="store_true", help="no progress or statistics on stderr")
    p.add_argument("-b", dest="backoff_bits", type=int, metavar="B",
                   help="trie: quantise back-offs to B bits (needs -q)")
    p.add_argument("-a", dest="pointer_bits", type=int, metavar="B",
                   help="trie: compress pointers with an array of offsets holding up to B bits")
    p.add_argument("--threads", type=int, default=1, help="threads scoring the n-grams (default 1)")
    p.add_argument("--eval", action="append", type=_file, metavar="TEXT",
                   help="report the perplexity of this text (repeat for several)")


def _output_type(args):
    """(format, binary writer options) of the output; -q alone is --quiet."""
    prob_bits = None
    if args.q is True:
        args.quiet, args.progress = True, False
    elif args.q is not None:
        try:
            prob_bits = int(args.q)
        except ValueError:
            raise ValueError(f"-q takes a number of bits (or nothing, for quiet), not {args.q!r}") from None
    kind = args.type or ("nplm" if args.out.endswith(".nplm") else "arpa")
    binary = dict(prob_bits=prob_bits, backoff_bits=args.backoff_bits, pointer_bits=args.pointer_bits)
    if kind == "arpa" and any(v is not None for v in binary.values()):
        raise ValueError("-q B, -b and -a apply to a binary output (--type trie)")
    if kind != "arpa":
        kenlm_write.check_options(kind, **binary)     # (bad bits fail before the work)
    return kind, binary


def _write(tables, out, kind, binary, progress):
    if kind == "arpa":
        write_arpa(tables, out, progress=progress)
    else:
        kenlm_write.build_binary(tables, out, kind, **binary)


def _tables_format(path):
    fmt = detect(path)
    if fmt not in ("arpa", "binary", "kenlm"):
        raise ValueError(f"{path}: a {fmt} model lists no n-grams; nplm prune and nplm mix take back-off "
                         "models (ARPA, KenLM or nplm binaries), and nplm distil turns any model into one")
    return fmt


def _tables(path):
    return backoff_tables(path, _tables_format(path))


def _say(args, text):
    if not args.quiet:
        print(text, file=sys.stderr)


@command("prune", "Relative-entropy pruning of a back-off model (Stolcke; SRILM's ngram -prune), "
         "optionally measured against a reference model whose probabilities the kept n-grams get")
class Prune:
    OUTPUTS = ("out",)
    INPUTS = ("model", "reference", "eval")

    @staticmethod
    def add_arguments(p):
        p.add_argument("model", type=_file, help="the back-off model: ARPA, KenLM or nplm binary")
        p.add_argument("out", help="the pruned model (see --type)")
        size = p.add_mutually_exclusive_group(required=True)
        size.add_argument("--threshold", type=_threshold, metavar="T",
                          help="prune the n-grams whose removal raises the perplexity by less than the "
                               "fraction T (SRILM's -prune, e.g. 1e-8)")
        size.add_argument("--target-size", type=_size, metavar="N",
                          help="keep at most N n-grams of orders >= 2 (unigrams are never pruned): "
                               "the threshold that keeps the most within N")
        p.add_argument("--reference", type=_file, metavar="MODEL",
                       help="measure the relative entropy against this model (any model nplm loads: "
                            "a network, an interpolation spec) and give the kept n-grams its probabilities")
        _add_output(p)

    @staticmethod
    def run(args):
        kind, binary = _output_type(args)
        tables = _tables(args.model)
        result = lib.prune(args.model, tables, threshold=args.threshold, target_size=args.target_size,
                           reference=args.reference, threads=args.threads, progress=args.progress)
        _write(result.tables, args.out, kind, binary, args.progress)
        _say(args, f"n-grams: {lib.counts_line(result.before)} -> {lib.counts_line(result.after)} "
                   f"(orders >= 2: {sum(result.after[1:])}); threshold {result.threshold:.6g}")
        for text in args.eval or ():
            print(f"perplexity of {text}: {lib.perplexity(args.out, text):.4f} (input model "
                  f"{lib.perplexity(args.model, text):.4f})", file=sys.stderr)
        return 0


@command("mix", "Interpolate back-off models linearly into one back-off model (SRILM's ngram -mix-lm "
         "-write-lm): the union of their n-grams with the mixture's probabilities")
class Mix:
    OUTPUTS = ("out",)
    INPUTS = ("models", "tune", "eval")

    @staticmethod
    def add_arguments(p):
        p.add_argument("models", nargs="+", type=_file, metavar="MODEL",
                       help="back-off models (ARPA, KenLM or nplm binaries), or one linear interpolation "
                            "spec of them (nplm interpolate) with its weights")
        p.add_argument("--out", required=True, help="the mixed model (see --type)")
        p.add_argument("--weights", type=float, nargs="+", metavar="W",
                       help="one weight per model (default uniform, or tuned with --tune)")
        p.add_argument("--tune", type=_file, metavar="TEXT",
                       help="tune the weights by EM on this text (one sentence per line)")
        _add_output(p)

    @staticmethod
    def run(args):
        kind, binary = _output_type(args)
        if args.weights is not None and len(args.weights) != len(args.models):
            raise ValueError(f"{len(args.weights)} --weights for {len(args.models)} models")
        mixture, paths = lib.mixture(args.models, args.weights)
        tables = [_tables(p) for p in paths]
        if args.tune is not None:
            result = mixture.tune(args.tune)
            _say(args, f"weights tuned on {args.tune}: {' '.join(f'{w:.6g}' for w in result.weights)}")
        tables = lib.mix(mixture, tables, threads=args.threads, progress=args.progress)
        _write(tables, args.out, kind, binary, args.progress)
        _say(args, f"n-grams: {lib.counts_line(tables.counts)}")
        for text in ([args.tune] if args.tune else []) + (args.eval or []):
            print(f"perplexity of {text}: {lib.perplexity(args.out, text):.4f} (dynamic mixture "
                  f"{lib.perplexity(mixture, text):.4f})", file=sys.stderr)
        return 0
