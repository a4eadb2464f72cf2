"""``nplm interpolate``, ``distil``, ``rescore`` and ``ensemble``: combining models."""
import os
import sys

import numpy as np

from nplm.backoff.kenlm import write as kenlm_write
from nplm.cli.combine import Ensemble, Rescore
from nplm.cli.common import command, error, input_file, memory_size, nonneg_int, plain_warnings, positive_int
from nplm.compose.distil_auto import QUALITIES, distil_auto_to_file
from nplm.compose.interpolate import interpolate
from nplm.io.atomic import same_file


@command("interpolate", "Combine models (linear or log-linear), tune the weights on a dev text, "
         "write a spec that nplm.Model loads")
class Interpolate:
    OUTPUTS = ("out",)
    INPUTS = ("model", "tune")

    @staticmethod
    def add_arguments(p):
        p.add_argument("--model", action="append", required=True, metavar="PATH",
                       help="a component: ARPA, nplm binary or spec (repeat for each)")
        p.add_argument("--weight", action="append", type=float, metavar="W",
                       help="its weight (repeat, one per --model; default uniform)")
        p.add_argument("--mode", choices=["linear", "loglinear"], default="linear",
                       help="linear: sum of weighted probabilities (default); loglinear: "
                       "weighted sum of log-probabilities, normalised over the vocabulary")
        p.add_argument("--unnormalized", action="store_true",
                       help="loglinear without the normaliser (decoder features, not probabilities)")
        p.add_argument("--unknown", choices=["unk", "split"], default="split",
                       help="a word a component lacks gets an even share of its <unk> probability "
                       "(split, default: keeps linear mixtures normalised) or all of it, once per "
                       "missing word (unk: a linear mixture of different vocabularies then sums "
                       "to more than 1)")
        p.add_argument("--allow-unnormalised", action="store_true",
                       help="tune a linear --unknown unk mixture of different vocabularies anyway "
                       "(refused otherwise: its dev perplexity is too low)")
        p.add_argument("--tune", metavar="DEV", type=input_file, help="tune the weights on this text "
                       "(one sentence per line): EM for linear, Newton for loglinear")
        p.add_argument("--bucket-by", type=int, metavar="I", help="linear: weights per context "
                       "bucket, the length of the context model I (0-based, a back-off model) "
                       "can use, plus the sentence start; tuned per bucket with --tune")
        p.add_argument("--bucket-bins", type=int, default=1, metavar="K", help="with --bucket-by: split "
                       "each context length into K bins of that model's back-off weight (edges at "
                       "the --tune text's quantiles; default 1)")
        p.add_argument("--favour", nargs=2, metavar=("I", "F"), help="after tuning, move every "
                       "weight row a fraction F of the way towards model I alone (a distillation "
                       "teacher: see the README)")
        p.add_argument("--max-contexts", type=int, help="loglinear tuning: most dev contexts "
                       "whose full distributions are held (default: what fits in 512 MiB)")
        p.add_argument("--threads", type=int, default=2, help="threads for loglinear tuning (default 2)")
        p.add_argument("--out", required=True, help="write the JSON spec here")

    @staticmethod
    def run(args):
        if args.weight is not None and len(args.weight) != len(args.model):
            raise ValueError(f"{len(args.weight)} --weight for {len(args.model)} --model")
        for m in args.model:
            if os.path.exists(args.out) and same_file(m, args.out):
                raise ValueError(f"refusing to overwrite the model {m}")
        if args.max_contexts is not None and args.max_contexts < 1:
            raise ValueError(f"--max-contexts {args.max_contexts}: expected a positive number of dev contexts")
        if args.bucket_bins > 1 and not args.tune:
            raise ValueError("--bucket-bins needs --tune: the bin edges are the dev text's quantiles")
        favour = None
        if args.favour is not None:
            try:
                favour = int(args.favour[0]), float(args.favour[1])
            except ValueError:
                raise ValueError(f"--favour takes a model index and a fraction, not {' '.join(args.favour)!r}") from None
        with plain_warnings():        # (an unnormalised mixture's notice)
            mix = interpolate(args.model, args.weight, args.mode, normalize=not args.unnormalized,
                              unknown=args.unknown, bucket_by=args.bucket_by, bucket_bins=args.bucket_bins)
        extra = {}
        if args.tune:
            if mix._unnormalised is not None and not args.allow_unnormalised:
                raise ValueError("refusing to tune a mixture that is not normalised (above); "
                                 "--unknown split keeps it normalised, --allow-unnormalised tunes it anyway")
            res = mix.tune(args.tune, max_contexts=args.max_contexts, threads=args.threads,
                           progress=args.progress, allow_unnormalised=args.allow_unnormalised)
            extra = {"tuned_on": os.path.abspath(args.tune), "dev_perplexity": res.perplexity,
                     "dev_tokens": res.tokens}
            rows = np.atleast_2d(res.weights)
            print(f"weights {' / '.join(' '.join(f'{w:.6g}' for w in r) for r in rows)}: dev perplexity "
                  f"{res.perplexity:.4f} (uniform weights: {res.start_perplexity:.4f}; "
                  f"{res.tokens} tokens{', sampled contexts' if res.sampled else ''})", file=sys.stderr)
        if favour is not None:
            mix.favour(*favour)
            extra["favoured"] = {"model": favour[0], "fraction": favour[1]}
        mix.save(args.out, **extra)
        return 0




@command("distil", "Distil a model (neural, interpolated or back-off) into a normalised back-off ARPA table")
class Distil:
    OUTPUTS = ("arpa",)
    INPUTS = ("model", "text", "ngrams", "sample_text", "lower")

    @staticmethod
    def add_arguments(p):
        p.add_argument("model", help="teacher: any model nplm.Model loads (ARPA, nplm binary, interpolation spec)")
        p.add_argument("--text", type=input_file, help="training text whose n-grams to list (one sentence per line)")
        p.add_argument("--ngrams", help="list the n-grams of this ARPA file (with or instead of --text)")
        p.add_argument("--order", "-o", type=int, required=True, help="order of the distilled table")
        p.add_argument("--arpa", required=True,
                       help="output: ARPA (.gz/.bz2/.xz compressed by extension; '-' for stdout), or an "
                            "nplm binary when the name ends in .nplm/.bin, or the binary --type names")
        p.add_argument("--type", choices=kenlm_write.TYPES,
                       help="write a binary instead of the ARPA: KenLM's probing or trie file (the bytes "
                            "build_binary writes from the ARPA) or nplm's")
        p.add_argument("--prob-bits", type=int, metavar="B", help="trie: quantise probabilities to B bits "
                       "(build_binary -q)")
        p.add_argument("--backoff-bits", type=int, metavar="B", help="trie: quantise back-offs to B bits "
                       "(build_binary -b)")
        p.add_argument("--pointer-bits", type=int, metavar="B", help="trie: compress pointers with an array "
                       "of offsets of up to B bits (build_binary -a)")
        Distil.add_defaults(p.add_argument_group("defaults (docs/distillation-recipe.md, chosen from the teacher)"))
        p.add_argument("--min-count", type=int, nargs="+", metavar="N",
                       help="count thresholds for the text's n-grams of orders 2..N (last one repeats)")
        p.add_argument("--sample-text", metavar="FILE", type=input_file,
                       help="also list the n-grams of this text sampled from the teacher (nplm sample): "
                            "the likely unseen n-grams a training text cannot list")
        p.add_argument("--sample-min-count", type=int, nargs="+", metavar="N",
                       help="count thresholds for the sampled n-grams of orders 2..N (default 1 2 with a "
                            "pool drawn here, else 1)")
        p.add_argument("--top-k", type=nonneg_int, default=0,
                       help="also list each text context's K most probable continuations (default 0: none)")
        p.add_argument("--top-k-min-count", type=int, default=2,
                       help="only for contexts seen at least this often (default 2)")
        p.add_argument("--threads", type=int, default=1,
                       help="threads scoring the teacher (only for teachers safe to share, e.g. back-off)")
        p.add_argument("-S", "--count-memory", type=memory_size, metavar="SIZE",
                       help="memory budget for counting the text's and the pool's n-grams, as estimate's -S "
                            "(2G, 512M, 80%%): counts beyond it spill to sorted files in -T, to the same table "
                            "(default: --memory where there is one, else 80%% of physical memory)")
        p.add_argument("-T", "--temp_prefix", "--temp-prefix", metavar="DIR",
                       help="folder for temporary files: spilled counts and the pool sampled here (default "
                            "TMPDIR or /tmp); they are removed when the command ends, whichever way")

    @staticmethod
    def add_defaults(g):
        g.add_argument("--quality", choices=QUALITIES, default="default",
                       help="fast: the training text's n-grams only; default: plus a pool sampled from the "
                            "teacher's networks within --budget/--memory (20m, 4G) and continuation unigrams; "
                            "best: the recipe's distillation (135 sampled tokens per training token, 120M on PTB, "
                            "from up to two networks)")
        g.add_argument("--budget", metavar="TIME", help="time for the sampled pool's size, e.g. 20m, 1.5h")
        g.add_argument("--memory", metavar="SIZE",
                       help="memory for the whole run, e.g. 4G: it sizes the sampled pool, and counting stays "
                            "within it (the default -S)")
        g.add_argument("--valid", type=input_file, metavar="DEV",
                       help="validation text: the table's perplexity is reported beside the back-off model's, "
                            "and a mixture's weights are re-tuned per back-off context bucket on it "
                            "(default: the text the mixture was tuned on)")
        g.add_argument("--target-size", "--prune-to", dest="target_size", type=positive_int, metavar="NGRAMS",
                       help="relative-entropy pruning to at most this many n-grams of orders >= 2 "
                            "(default: the back-off model's size)")
        g.add_argument("--no-prune", action="store_true", help="keep every listed n-gram")
        g.add_argument("--lower", default="auto",
                       help="model giving the probabilities of orders below --order (default auto: the "
                            "mixture's back-off model when a network lacks --variable-history; 'none': the teacher)")
        g.add_argument("--continuation", type=positive_int, nargs="?", const=1, default=None, metavar="K",
                       help="shape the unigrams (orders 1..K with K, K below --order) for backing off: fitted to the "
                            "teacher's leftover mass of longer contexts (Kneser-Ney's idea, computed from the "
                            "teacher); default: on with a sampled pool; K > 1 measured worse on PTB")
        g.add_argument("--no-continuation", action="store_true", help="keep the teacher's unigrams")
        g.add_argument("--no-buckets", action="store_true",
                       help="keep a mixture's weights as they are (default: re-tuned per back-off bucket)")
        g.add_argument("--no-favour", action="store_true",
                       help="keep the teacher as it is (default, for a mixture with a validation text: "
                            "moved towards its back-off model as far as the validation text prefers)")
        g.add_argument("--sample-tokens", type=nonneg_int, metavar="N",
                       help="sample exactly N tokens from the teacher's networks into the pool (0: none)")

    @staticmethod
    def run(args):
        if args.text is None and args.ngrams is None and args.sample_text is None:
            return error("give --text, --ngrams and/or --sample-text: the n-grams to list")
        if args.continuation and args.continuation >= args.order:
            return error(f"--continuation {args.continuation}: it reshapes orders below --order {args.order}, "
                          + (f"so at most {args.order - 1}" if args.order > 1 else "and an order-1 table has none"))
        bits = dict(prob_bits=args.prob_bits, backoff_bits=args.backoff_bits, pointer_bits=args.pointer_bits)
        if args.type is None and any(v is not None for v in bits.values()):
            return error("--prob-bits, --backoff-bits and --pointer-bits apply to a binary output: add --type trie")
        binary = None if args.type is None else dict(type=args.type, **bits)
        with plain_warnings():        # (a teacher without variable history; a table worse than its input)
            tables, report, plan = distil_auto_to_file(
                args.model, args.arpa, args.order, args.text, binary=binary, quality=args.quality,
                valid=args.valid,
                log=None if args.quiet else lambda s: print(f"nplm distil: {s}", file=sys.stderr),
                budget=args.budget, memory=args.memory, lower=args.lower,
                target_size=None if args.no_prune else args.target_size or "auto",
                continuation=0 if args.no_continuation else args.continuation,
                buckets=False if args.no_buckets else None, sample_tokens=args.sample_tokens,
                favour=not args.no_favour,
                ngrams=args.ngrams, min_count=args.min_count, sample_text=args.sample_text,
                sample_min_count=args.sample_min_count, top_k=args.top_k,
                top_k_min_count=args.top_k_min_count, threads=args.threads, progress=args.progress,
                count_memory=args.count_memory, temp_prefix=args.temp_prefix)
        if not args.quiet:
            print("n-grams: " + " ".join(f"{k + 1}={c}" for k, c in enumerate(tables.counts)), file=sys.stderr)
        if report is not None and not args.quiet:
            print(report.line(), file=sys.stderr)
        if report is not None and report.worse:
            bar = "!" * 78
            print(f"{bar}\nnplm distil: WARNING: the table is worse than its back-off input "
                  f"({report.table:.2f} > {report.backoff:.2f}); the options above make it better\n{bar}",
                  file=sys.stderr)
        return 0




command("rescore", Rescore.HELP)(Rescore)
command("ensemble", Ensemble.HELP)(Ensemble)
