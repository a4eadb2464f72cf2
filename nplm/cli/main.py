"""``nplm <command>``: argument parsing and progress only; the work lives in the
library modules.  Each command registers itself with ``@command`` below; its
``add_arguments(parser)`` declares flags and its ``run(args)`` returns an exit code.
"""
import argparse
import contextlib
import dataclasses
import difflib
import glob
import os
import shlex
import stat
import sys
import warnings

import numpy as np

from nplm import Model, __version__
from nplm.backoff import binary as backoff
from nplm.backoff.arpa import read_arpa, write_arpa
from nplm.backoff.binary import build_binary
from nplm.backoff.estimate import DEFAULT_MEMORY, estimate, parse_size
from nplm.backoff.estimate.counts import count_to_file, merge_files
from nplm.backoff.kenlm import write as kenlm_write
from nplm.cli import output
from nplm.cli.combine import Ensemble, Rescore, train_members
from nplm.compose.distil_auto import QUALITIES, distil_auto_to_file
from nplm.compose.interpolate import interpolate, is_spec
from nplm.convert import backoff_tables, convert, detect, target_format
from nplm.evaluate import evaluate, kenlm_floats
from nplm.io import container
from nplm.io.atomic import check_output, refuse_stdout, same_file
from nplm.io.files import open_text, sniff
from nplm.io.resources import arpa_header_counts
from nplm.io.text import split_words
from nplm.model import quiet_config
from nplm.neural import clusters
from nplm.neural.network import NeuralConfig
from nplm.neural.query import precompute
from nplm.neural.sample import sample_to_file
from nplm.neural.train import TrainConfig, checkpoint_settings, train
from nplm.recipes.ptb import PTB_FILES, Settings, reproduce
from nplm.verify import Unreadable, verify

_COMMANDS = {}


def command(name, help):
    """Register ``cls`` (with ``add_arguments(p)`` and ``run(args)``) as a subcommand.
    ``cls.OUTPUTS`` names the arguments that are output files: main checks that they
    can be written before ``run`` starts the work, and that none of them is one of the
    files ``cls.INPUTS`` names (through links too: a command never overwrites its
    input)."""
    def register(cls):
        _COMMANDS[name] = (help, cls)
        return cls
    return register


def _error(message):
    print(f"nplm: error: {message}", file=sys.stderr)
    return 1


@contextlib.contextmanager
def _plain_warnings():
    """The library's warnings inside the block, each printed once as a plain
    ``nplm: message`` line on stderr (not Python's file:line: category form)."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *rest, **kw: print(f"nplm: {message}", file=sys.stderr)
        yield


# --- commands are defined below, one class each -------------------------------------


def _add_normalization(p):
    p.add_argument("--normalization", choices=["exact", "class", "tree", "unnormalized", "fallback"],
                   help="neural models only: how probabilities are normalised (default: the best exact "
                        "mode the model supports)")


def _open_lines(path):
    # Invalid UTF-8 becomes U+FFFD (an unknown word, as the raw bytes are to KenLM)
    # instead of aborting the whole run with a decode error.
    return open_text(path or "-", errors="replace")


_QUERY_LEVELS = {"2": {"word", "sentence", "summary"}, "1": {"sentence", "summary"}, "0": {"summary"}}


def _query_levels(values):
    """KenLM query's -v, in order: a name turns its output on, a number sets all three;
    nothing given means all three (lm/query_main.cc)."""
    levels = set()
    for v in values or ():
        levels = set(_QUERY_LEVELS[v]) if v in _QUERY_LEVELS else levels | {v}
    return levels or set(_QUERY_LEVELS["2"])


def _is_arpa(path):
    """Whether a model file that loaded was an ARPA file (not a binary or a spec)."""
    return not container.is_container(path) and not is_spec(path)


@command("query", "Score text like KenLM's query: per-word output and a perplexity summary")
class Query:
    @staticmethod
    def add_arguments(p):
        p.add_argument("model", help="any model: ARPA file (plain/.gz/.bz2/.xz), nplm back-off or neural "
                                       "binary, or interpolation spec")
        p.add_argument("--text", default="-", type=_input_file, help="text to score, one sentence per line (default stdin)")
        p.add_argument("-n", dest="no_context", action="store_true",
                       help="do not wrap each line in <s> and </s>")
        p.add_argument("-v", dest="verbosity", action="append", metavar="LEVEL",
                       choices=["summary", "sentence", "word", "0", "1", "2"],
                       help="summary|sentence|word: print this output (repeatable: -v summary -v word); "
                            "2: all three, 1: sentence and summary, 0: summary only (default: all three). "
                            "As in KenLM, word output alone ends no line")
        _add_normalization(p)

    @staticmethod
    def run(args):
        levels = _query_levels(args.verbosity)
        # KenLM's advice to build a binary, once the ARPA has loaded: a file that is
        # missing or no model gets its error alone.
        model = Model(args.model, quiet_config(), normalization=args.normalization)
        if _is_arpa(args.model):
            print("Loading the LM will be faster if you build a binary file.", file=sys.stderr)
        out = sys.stdout
        context = not args.no_context
        vocab = model.vocab
        eos = vocab.id("</s>")

        def per_line(line, probs, lengths, oovs, total):
            # ASCII white space only, as the kernels (and KenLM) split: str.split()
            # would also split at U+00A0 etc. and mislabel the scores.
            words = split_words(line)
            if "word" in levels:
                shown = kenlm_floats(probs)
                items = [f"{w}={vocab.id(w)} {l} {p}" for w, p, l in zip(words, shown, lengths)]
                if context:
                    items.append(f"</s>={eos} {lengths[-1]} {shown[-1]}")
                out.write("\t".join(items) + "\t")
            if "sentence" in levels:
                out.write(f"Total: {kenlm_floats([total])[0]} OOV: {int(oovs.sum())}\n")

        with _open_lines(args.text) as f:
            stats = evaluate(model, f, context, per_line if levels & {"word", "sentence"} else None)
        if "summary" in levels:
            out.write(stats.summary())
        return 0


@command("perplexity", "Corpus perplexity of a text (including and excluding OOVs)")
class Perplexity:
    @staticmethod
    def add_arguments(p):
        p.add_argument("model", help="any model: ARPA file, nplm back-off or neural binary, or "
                                       "interpolation spec")
        p.add_argument("text", type=_input_file, help="text file, one sentence per line ('-' for stdin; may be compressed)")
        _add_normalization(p)

    @staticmethod
    def run(args):
        model = Model(args.model, quiet_config(), normalization=args.normalization)
        with _open_lines(args.text) as f:
            stats = evaluate(model, f)
        sys.stdout.write(stats.summary())
        return 0


@command("build-binary", "Write a binary model from an ARPA file: KenLM's probing or trie file "
         "(exactly as its build_binary writes it) or nplm's own")
class BuildBinary:
    # [TYPE] ARPA OUT may be split by options, as build_binary's getopt allows
    # ("trie -q 8 in.arpa out"): main hands the positionals argparse left over to "files"
    EXTRA_POSITIONALS = "files"

    @staticmethod
    def add_arguments(p):
        p.usage = ("nplm build-binary [-p M] [-q B] [-b B] [-a B] [-v] [-u P] [-s] "
                   "[probing|trie|nplm] in.arpa out")
        p.add_argument("files", nargs="+", metavar="[TYPE] ARPA OUT",
                       help="TYPE: probing (the default) or trie, KenLM's formats as its build_binary "
                       "writes them (they load in kenlm and nplm), or nplm, nplm's own probing format "
                       "(the default for an OUT named *.nplm); ARPA: plain/.gz/.bz2/.xz, '-' for "
                       "stdin; OUT: a file (it is memory-mapped, so not '-')")
        p.add_argument("-p", dest="multiplier", type=float, default=None, metavar="M",
                       help="probing hash table buckets per n-gram (> 1.0; default 1.5, nplm: 1.45)")
        p.add_argument("-q", dest="prob_bits", type=int, metavar="B",
                       help="trie: quantise probabilities to B bits")
        p.add_argument("-b", dest="backoff_bits", type=int, metavar="B",
                       help="trie: quantise back-offs to B bits (needs -q; default the same as -q)")
        p.add_argument("-a", dest="pointer_bits", type=int, metavar="B",
                       help="trie: compress pointers with an array of offsets holding up to B bits")
        p.add_argument("-v", dest="include_vocab", action="store_false",
                       help="leave the vocabulary's strings out of a KenLM file (words then score by hash)")
        p.add_argument("-u", dest="unknown_logprob", type=float, default=-100.0, metavar="P",
                       help="log10 probability of <unk> when the ARPA lacks it (default -100)")
        p.add_argument("-s", dest="allow_missing_markers", action="store_true",
                       help="build even if the model lacks <s> or </s>")
        for flag in ("-T", "-S", "-w"):
            p.add_argument(flag, dest="ignored" + flag[1], metavar="X",
                           help="accepted for build_binary compatibility; nplm builds in memory")

    @staticmethod
    def run(args):
        if len(args.files) not in (2, 3):
            raise ValueError("build-binary takes [TYPE] ARPA OUT (TYPE one of "
                             f"{', '.join(kenlm_write.TYPES)})")
        kind, source, out = ([None] + args.files)[-3:]
        kind = kenlm_write.resolve_type(kind, out)
        check_output(out)
        refuse_stdout(out)
        if kind == kenlm_write.NPLM and args.multiplier is not None:
            try:
                # the ARPA header's counts give the tables' size before the file is read
                backoff.check_multiplier(args.multiplier, arpa_header_counts(source))
            except ValueError as e:
                return _error(f"-p: {e}")
        if same_file(source, out):
            raise ValueError(f"refusing to overwrite the input {source}")
        options = dict(multiplier=args.multiplier, prob_bits=args.prob_bits,
                       backoff_bits=args.backoff_bits, pointer_bits=args.pointer_bits,
                       include_vocab=args.include_vocab, unknown_logprob=args.unknown_logprob,
                       allow_missing_markers=args.allow_missing_markers)
        opts = kenlm_write.check_options(kind, **options)
        counts = arpa_header_counts(source)
        if opts is not None and opts.type == kenlm_write.PROBING and counts and len(counts) >= 2:
            kenlm_write.check_probing_memory(counts, opts)    # a huge -p fails now, not after reading
        kenlm_write.build_binary_from_arpa(source, out, kind, progress=args.progress, **options)
        return 0


def _int_at_least(lowest, what):
    """An argparse type: an integer >= ``lowest``, called ``what`` in the error."""
    def parse(value):
        try:
            n = int(value)
        except ValueError:
            n = None
        if n is None or n < lowest:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, got {value!r}")
        return n
    return parse


def _input_files(value):
    """An argparse type: an existing file, -, or a glob pattern that matches files."""
    if value != "-" and not os.path.exists(value) and glob.has_magic(value):
        if not glob.glob(value):
            raise argparse.ArgumentTypeError(f"no file matches {value!r}")
        return value
    return _input_file(value)


def _one_or_list(values):
    return values[0] if len(values) == 1 else list(values)


def _memory_size(value):
    try:
        parse_size(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def _input_file(value):
    """An argparse type: a file that exists (a pipe such as <(zcat t.gz) too), or -;
    argparse then names the option, before any model is loaded or banner printed."""
    if value != "-" and (not os.path.exists(value) or os.path.isdir(value)):
        raise argparse.ArgumentTypeError(f"no such file: {value!r}" if not os.path.exists(value)
                                         else f"not a file: {value!r}")
    return value


_positive_int = _int_at_least(1, "positive")
_nonneg_int = _int_at_least(0, "non-negative")


def _positive_minutes(value):
    try:
        x = float(value)
    except ValueError:
        x = float("nan")
    if not 0 < x < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of minutes, got {value!r}")
    return x


def _lmplz_bool(value):
    v = str(value).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected 0 or 1, got {value!r}")


@command("estimate", "Estimate a modified Kneser-Ney model from text, like KenLM's lmplz")
class Estimate:
    OUTPUTS = ("arpa", "binary")
    INPUTS = ("text", "limit_vocab_file")

    @staticmethod
    def add_arguments(p):
        p.add_argument("-o", "--order", type=int, required=True, help="order of the model")
        p.add_argument("--text", nargs="+", default=["-"], type=_input_files,
                       help="training text, one sentence per line (default stdin; plain, gzip, bz2 "
                       "or xz); several files or glob patterns are read in turn as one text")
        p.add_argument("--counts", nargs="+", type=_input_file, metavar="FILE",
                       help="estimate from counts files of `nplm count` instead of --text (shards "
                       "merged in the order given)")
        p.add_argument("--arpa", help="write the ARPA file here (default stdout unless --binary)")
        p.add_argument("--binary", help="write a binary model here (a file, not '-'): KenLM's probing "
                       "file, or nplm's own format for a name ending in .nplm (see --type)")
        p.add_argument("--type", dest="binary_type", choices=kenlm_write.TYPES,
                       help="--binary's format, as build-binary's TYPE: probing or trie (KenLM's, "
                       "exactly as its build_binary writes them from the ARPA) or nplm")
        p.add_argument("-p", dest="multiplier", type=float, help="--binary: build-binary's -p")
        p.add_argument("-b", dest="backoff_bits", type=int, help="--binary: build-binary's -b")
        p.add_argument("-a", dest="pointer_bits", type=int, help="--binary: build-binary's -a")
        p.add_argument("--discount_fallback", "--discount-fallback", nargs="*", metavar="D",
                       help="when the data cannot give discounts, use these for adjusted counts "
                       "1, 2, 3+ (default 0.5 1 1.5)")
        p.add_argument("--prune", nargs="+", metavar="T", help="per-order count thresholds "
                       "(non-decreasing, first 0); the last applies to higher orders")
        p.add_argument("--interpolate_unigrams", "--interpolate-unigrams", type=_lmplz_bool,
                       nargs="?", const=True, default=True, metavar="0|1",
                       help="interpolate unigrams with the uniform distribution (default 1); "
                       "0 gives the mass to <unk> as SRILM does")
        p.add_argument("--limit_vocab_file", "--limit-vocab-file", type=_input_file,
                       help="prune n-grams with words not listed (whitespace-separated) in this file")
        p.add_argument("--skip_symbols", "--skip-symbols", action="store_true",
                       help="treat <s>, </s> and <unk> in the text as whitespace")
        p.add_argument("--verbose_header", "--verbose-header", action="store_true",
                       help="add input file, token count and smoothing comments to the ARPA")
        p.add_argument("--vocab_pad", "--vocab-pad", type=int, default=0,
                       help="spread unigram interpolation mass as if the vocabulary had this many words")
        p.add_argument("-S", "--memory", type=_memory_size, default=DEFAULT_MEMORY,
                       help="memory budget, as lmplz's: 2G, 512M, 80%% of physical memory (the "
                       "default); counts beyond it spill to sorted files in -T and the model is "
                       "estimated part by part, to the same bytes")
        p.add_argument("-T", "--temp_prefix", "--temp-prefix",
                       help="folder for temporary files (default TMPDIR or /tmp); they are removed "
                       "when the command ends, whichever way")
        p.add_argument("--scheduler", metavar="ADDRESS",
                       help="estimate on this Dask cluster (tcp://host:8786; the text files must be "
                       "readable by the workers; pip install nplm[dask])")
        p.add_argument("-q", dest="q", nargs="?", const=True, metavar="B",
                       help="alone: no progress on stderr; with B: --binary's -q (quantise a trie's "
                       "probabilities to B bits)")
        p.add_argument("--quiet", action="store_true", help="no progress on stderr")

    @staticmethod
    def run(args):
        refuse_stdout(args.binary)      # before the work
        prob_bits = None
        if args.q is True:
            args.quiet = True
        elif args.q is not None:
            try:
                prob_bits = int(args.q)
            except ValueError:
                raise ValueError(f"-q takes a number of bits (or nothing, for quiet), not {args.q!r}") from None
        options = {k: v for k, v in (("multiplier", args.multiplier), ("prob_bits", prob_bits),
                                      ("backoff_bits", args.backoff_bits),
                                      ("pointer_bits", args.pointer_bits)) if v is not None}
        if (options or args.binary_type) and args.binary is None:
            raise ValueError("--type, -p, -q B, -b and -a set the format of --binary, which is not given")
        args.binary_options = options
        if args.scheduler:
            from dask.distributed import Client  # optional dependency
            with Client(args.scheduler) as client:
                return Estimate.estimate(args, client)
        return Estimate.estimate(args, None)

    @staticmethod
    def estimate(args, client):
        arpa = args.arpa if args.arpa is not None else (None if args.binary else "-")
        fallback = None
        if args.discount_fallback is not None:
            fallback = args.discount_fallback or True
        # with -q, notices (fallback discounts, <unk> counted) still reach stderr, plainly
        with _plain_warnings():
            text = None if args.counts else _one_or_list(args.text)
            estimate(text, args.order, arpa=arpa, binary=args.binary, counts=args.counts, client=client,
                     discount_fallback=fallback, memory=args.memory, temp_prefix=args.temp_prefix,
                     prune=args.prune, interpolate_unigrams=args.interpolate_unigrams,
                     limit_vocab_file=args.limit_vocab_file, skip_symbols=args.skip_symbols,
                     verbose_header=args.verbose_header, vocab_pad=args.vocab_pad,
                     progress=not args.quiet, binary_type=args.binary_type,
                     binary_options=args.binary_options)
        return 0


@command("count", "Count the n-grams of a text (or merge counts files) for `nplm estimate --counts`")
class Count:
    OUTPUTS = ("output",)

    @staticmethod
    def add_arguments(p):
        p.add_argument("-o", "--order", type=int, help="order of the n-grams (not with --merge)")
        p.add_argument("--text", nargs="+", default=["-"], type=_input_files,
                       help="text, one sentence per line (default stdin; plain, gzip, bz2 or xz); "
                       "several files or glob patterns are read in turn as one text")
        p.add_argument("--merge", nargs="+", type=_input_file, metavar="COUNTS",
                       help="merge these counts files (shards, in this order) instead of counting")
        p.add_argument("--output", required=True, help="the counts file to write")
        p.add_argument("--skip_symbols", "--skip-symbols", action="store_true",
                       help="treat <s>, </s> and <unk> in the text as whitespace")
        p.add_argument("-S", "--memory", type=_memory_size, default=DEFAULT_MEMORY,
                       help="memory budget while counting (as estimate's -S)")
        p.add_argument("-T", "--temp_prefix", "--temp-prefix", help="folder for temporary files")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")

    @staticmethod
    def run(args):
        if args.merge:
            merge_files(args.merge, args.output)
            return 0
        if args.order is None:
            return _error("give the order (-o) to count")
        count_to_file(_one_or_list(args.text), args.order, args.output, skip_symbols=args.skip_symbols,
                      memory=args.memory, temp_prefix=args.temp_prefix, progress=not args.quiet)
        return 0


@command("cluster", "Word classes from text: Brown (exchange) clustering or frequency binning")
class Cluster:
    OUTPUTS = ("output",)
    INPUTS = ("text",)

    @staticmethod
    def add_arguments(p):
        p.add_argument("--text", default="-", type=_input_file, help="training text, one sentence per line "
                       "(default stdin; plain, gzip, bz2 or xz); </s> ends every line")
        p.add_argument("-c", "--classes", type=int, required=True, help="number of classes")
        p.add_argument("-o", "--output", default="-",
                       help="write word<TAB>class<TAB>count lines here (.gz/.bz2/.xz compressed by "
                       "extension; default stdout)")
        p.add_argument("--method", choices=["brown", "frequency"], default="brown",
                       help="brown: maximise class-bigram likelihood (default); "
                       "frequency: sqrt-frequency bins")
        p.add_argument("--iterations", type=int, default=20, help="most exchange passes (default 20)")
        p.add_argument("--seed", type=_nonneg_int, default=0, help="tie-breaking seed (default 0)")

    @staticmethod
    def run(args):
        words, counts, ids = clusters.read_corpus(args.text)
        if args.method == "frequency":
            wc = clusters.frequency_bins(counts, args.classes)
        else:
            wc = clusters.brown_clusters(ids, len(words), args.classes, seed=args.seed,
                                         iterations=args.iterations, progress=args.progress)
        if not args.quiet:
            st = clusters.class_bigram_stats(ids, wc)
            print(f"{len(words)} words, {args.classes} classes: class-bigram perplexity "
                  f"{st['perplexity']:.2f}, mutual information {st['mutual_info']:.4f} bits",
                  file=sys.stderr)
        clusters.write_classes(args.output, words, wc, counts)   # ('-' is stdout)
        return 0


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
        p.add_argument("--tune", metavar="DEV", type=_input_file, help="tune the weights on this text "
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
        with _plain_warnings():        # (an unnormalised mixture's notice)
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


DESCRIPTION = ("Neural and Kneser-Ney n-gram language models with KenLM's tools: score text (query, "
               "perplexity), estimate like lmplz, build binaries, train neural models, interpolate, "
               "distil into back-off tables and convert between formats.  All probabilities are log10.")


def build_parser():
    parser = argparse.ArgumentParser(prog="nplm", description=DESCRIPTION,
                                     epilog="Run 'nplm COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"nplm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, cls) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        cls.add_arguments(p)
        output.add_options(p)
        p.set_defaults(_run=cls.run, _outputs=getattr(cls, "OUTPUTS", ()), _inputs=getattr(cls, "INPUTS", ()),
                       _extra_positionals=getattr(cls, "EXTRA_POSITIONALS", None))
    return parser


def _given_options(args):
    """The destinations of the options the command line gave explicitly: the same
    command line parsed again with every default suppressed."""
    parser = build_parser()
    for sub in parser._subparsers._group_actions[0].choices.values():
        for action in sub._actions:
            action.default = argparse.SUPPRESS
        sub._defaults.clear()
    return set(vars(parser.parse_args(args._argv)))


# KenLM's program names, for a user who types them after "nplm"
_KENLM_NAMES = {"lmplz": "estimate", "build_binary": "build-binary"}


def _check_command(parser, argv):
    """An unknown command: a close match or the KenLM program it names, before
    argparse's list of every choice."""
    name = argv[0] if argv else "-"
    if name.startswith("-") or name in _COMMANDS:
        return
    close = [_KENLM_NAMES[name]] if name in _KENLM_NAMES else difflib.get_close_matches(name, _COMMANDS, n=1)
    hint = f"; did you mean 'nplm {close[0]}'?" if close else ""
    parser.error(f"unknown command '{name}'{hint} (commands: {', '.join(_COMMANDS)})")


def _check_unknown(parser, args, extra):
    """Arguments the command does not take, reported with that command's usage (argparse
    names the top-level parser) and the closest option of the command."""
    if not extra:
        return
    sub = parser._subparsers._group_actions[0].choices[args.command] if args.command else parser
    options = [o for a in sub._actions for o in a.option_strings]
    hints = []
    for word in extra:
        close = difflib.get_close_matches(word.split("=")[0], options, n=1) if word.startswith("-") else []
        hints += [f"{word}: did you mean {close[0]}?"] if close else []
    sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f" ({'; '.join(hints)})" if hints else ""))


def main(argv=None):
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    _check_command(parser, argv)
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "_extra_positionals", None):
        words = [w for w in extra if w == "-" or not w.startswith("-")]
        getattr(args, args._extra_positionals).extend(words)
        extra = [w for w in extra if not (w == "-" or not w.startswith("-"))]
    _check_unknown(parser, args, extra)
    args._argv = argv
    output.configure(args)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        _check_outputs(args)        # a bad output name fails now, not after the work
        code = args._run(args) or 0
        sys.stdout.flush()      # a closed pipe shows here, not in the exit's flush
        return code
    except KeyboardInterrupt:
        hint = ""
        if args.command == "train" and os.path.exists(args.out + ".ckpt"):
            hint = f"; {args.out}.ckpt holds the last finished epoch: add --resume to go on from it"
        print(f"nplm: interrupted{hint}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _output_closed()
    except (OSError, ValueError) as e:
        return _error(_os_message(e))
    except MemoryError as e:
        return _error(f"out of memory: {e}" if str(e) else "out of memory")


def _os_message(e):
    """An OSError that names a file reads 'FILE: why', without Python's '[Errno N]'."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        names = f"{e.filename} -> {e.filename2}" if e.filename2 is not None else f"{e.filename}"
        return f"{names}: {e.strerror}"
    return str(e)


def _check_outputs(args):
    """Each output can be written and is none of the command's inputs."""
    for name in args._outputs:
        out = getattr(args, name)
        if out is None or out == "-":
            continue
        check_output(out)
        for input_name in args._inputs:
            sources = getattr(args, input_name, None)
            for src in sources if isinstance(sources, list) else [sources]:
                if src is not None and src != "-" and same_file(src, out):
                    raise ValueError(f"refusing to overwrite the input {src} with the output {out}")


def _output_closed():
    """The reader went away (``nplm query ... | head``): stop quietly, as a Unix tool
    killed by SIGPIPE does, with the status a shell reports for one (128 + 13).
    stdout now writes to /dev/null, so the interpreter's final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout without a descriptor (tests)
        pass
    return 141


@command("train", "Train a feed-forward neural n-gram model (NCE, class/tree-factored or full softmax)")
class Train:
    """Options mirror nplm.neural.NeuralConfig and nplm.train.TrainConfig; their defaults
    are the recommended PTB model."""
    OUTPUTS = ("out",)
    INPUTS = ("train", "valid")

    @staticmethod
    def add_arguments(p):  # long: one add_argument call per training option
        n, t = NeuralConfig(), TrainConfig()
        p.epilog = ("Example: nplm train --train ptb.train.txt --valid ptb.valid.txt --order 5 --out m.nplm\n"
                    "  The defaults are the recommended model (PTB test perplexity 129.6 after 15 minutes on\n"
                    "  2 cores): Baltescu & Blunsom's diagonal contexts, 1000-d, no hidden layer, Brown\n"
                    "  classes, class NCE with k=10.\n"
                    "Vaswani et al.: --context full --embedding-dim 150 --hidden 750,150 --output softmax "
                    "--objective nce --noise-samples 100\n"
                    "Bengio-style MLE: --context full --embedding-dim 128 --hidden 512 --objective mle")
        p.formatter_class = argparse.RawDescriptionHelpFormatter
        g = p.add_argument_group("data")
        g.add_argument("--train", required=True, type=_input_file,
                       help="training text, one sentence per line (plain/gz/bz2/xz)")
        g.add_argument("--valid", type=_input_file, help="validation text: perplexity per epoch, learning-rate halving, "
                       "early stopping (recommended)")
        g.add_argument("--out", required=True, help="output model file (a checkpoint OUT.ckpt is written after every epoch)")
        g.add_argument("--min-count", type=int, default=t.min_count,
                       help=f"words seen fewer times become <unk> (default {t.min_count})")
        g.add_argument("--vocab-size", type=int, default=t.vocab_size,
                       help="keep at most this many vocabulary entries, specials included (default: all)")
        g = p.add_argument_group("network")
        g.add_argument("--order", type=int, default=n.order, help=f"n-gram order, >= 2 (default {n.order})")
        g.add_argument("--embedding-dim", type=int, default=n.embedding_dim,
                       help=f"word embedding size (default {n.embedding_dim})")
        g.add_argument("--hidden", default=",".join(map(str, n.hidden)),
                       help="hidden layer sizes, comma separated, 0-2 layers ('' for none; default "
                            f"{','.join(map(str, n.hidden)) or 'none'})")
        g.add_argument("--context", choices=["full", "diagonal"], default=n.context,
                       help="per-position context transform: full matrices or diagonal (default %(default)s)")
        g.add_argument("--activation", choices=["relu", "tanh", "identity"], default=n.activation,
                       help="hidden activation (default %(default)s)")
        g.add_argument("--output", choices=["softmax", "class", "tree"], default=n.output,
                       help="output layer: full softmax, class-factored or Huffman-tree (default %(default)s)")
        g.add_argument("--classes", type=_positive_int, default=n.classes,
                       help="number of word classes for --output class (default: about sqrt(V))")
        g.add_argument("--clustering", choices=["brown", "frequency"], default=n.clustering,
                       help="how to form the classes (default %(default)s)")
        g.add_argument("--tie-embeddings", action=argparse.BooleanOptionalAction, default=n.tie_embeddings,
                       help="one table for input and output word vectors (needs the last hidden layer as "
                            "wide as the embeddings; default %(default)s)")
        g.add_argument("--variable-history", action=argparse.BooleanOptionalAction, default=n.variable_history,
                       help="train on randomly truncated contexts too, so one net serves every order, "
                            "as a distilled table's lower orders need (default %(default)s)")
        g.add_argument("--full-history", type=float, default=n.full_history, metavar="SHARE",
                       help="with variable history: the share of examples that keep their whole context, "
                            "the others a uniformly drawn shorter one (1/(order-1): every length alike, as "
                            "Zamora-Martinez et al.; default %(default)s)")
        g.add_argument("--shortlist", type=_nonneg_int, default=n.shortlist, metavar="N",
                       help="output units for only the N most frequent training words plus one "
                            "out-of-shortlist unit, whose probability the other words share by their "
                            "training counts (default: every word)")
        g.add_argument("--shortlist-input", action="store_true",
                       help="with --shortlist: the context side too (the words outside it share one "
                            "embedding)")
        g = p.add_argument_group("training")
        g.add_argument("--objective", choices=["nce", "mle"], default=n.objective,
                       help="noise-contrastive estimation or exact maximum likelihood "
                            "(default nce; mle for --output tree)")
        g.add_argument("--noise-samples", type=int, default=n.noise_samples,
                       help=f"NCE noise samples per example, k (default {n.noise_samples})")
        g.add_argument("--epochs", type=int, default=t.epochs, help=f"maximum epochs (default {t.epochs})")
        g.add_argument("--minibatch", type=int, default=t.minibatch, help=f"examples per update (default {t.minibatch})")
        g.add_argument("--learning-rate", type=float, default=t.learning_rate,
                       help=f"initial learning rate (default {t.learning_rate})")
        g.add_argument("--optimizer", choices=["sgd", "adagrad"], default=t.optimizer,
                       help="update rule (default %(default)s)")
        g.add_argument("--l2", type=float, default=t.l2, help=f"L2 weight decay (default {t.l2})")
        g.add_argument("--dropout", type=float, default=t.dropout,
                       help=f"dropout rate on hidden activations (default {t.dropout})")
        g.add_argument("--input-dropout", type=float, default=t.input_dropout,
                       help=f"dropout rate on the context embeddings (default {t.input_dropout})")
        g.add_argument("--max-halvings", type=int, default=t.max_halvings,
                       help=f"stop after this many learning-rate halvings (default {t.max_halvings})")
        g.add_argument("--time-limit", type=_positive_minutes, default=None,
                       help="stop after the epoch that passes this many minutes (default: none)")
        g.add_argument("--average", type=float, default=t.average,
                       help="validate and save a moving average of the weights with this time constant in "
                            f"epochs; 0 for the raw weights (default {t.average})")
        g.add_argument("--threads", type=int, default=t.threads, help=f"CPU threads (default {t.threads})")
        g.add_argument("--seed", type=_nonneg_int, default=t.seed,
                       help="random seed; with --threads 1 the same seed gives the same model bytes")
        g.add_argument("--resume", action="store_true", help="continue from OUT.ckpt")
        g.add_argument("--ensemble", type=_positive_int, default=1, metavar="K",
                       help="train K networks with seeds SEED, SEED+1, ... (saved as OUT.m0.nplm, ...) and "
                            "write their linear ensemble, tuned on --valid, to OUT (a JSON spec)")
        g.add_argument("--keep-checkpoint", action="store_true",
                       help="keep OUT.ckpt after training succeeds (default: removed)")

    @staticmethod
    def run(args):
        for src in (args.train, args.valid):
            if src and same_file(src, args.out):
                return _error(f"--out {args.out} would overwrite an input file")
        check_output(args.out + ".ckpt")   # written after each epoch
        try:
            hidden = tuple(int(h) for h in args.hidden.replace(" ", "").split(",") if h)
        except ValueError:
            return _error(f"--hidden takes comma-separated sizes such as 750,150, not {args.hidden!r}")
        config = NeuralConfig(order=args.order, embedding_dim=args.embedding_dim, hidden=hidden,
                              context=args.context, activation=args.activation, output=args.output,
                              objective=args.objective, noise_samples=args.noise_samples,
                              classes=args.classes, clustering=args.clustering,
                              variable_history=args.variable_history, full_history=args.full_history,
                              tie_embeddings=args.tie_embeddings,
                              shortlist=args.shortlist, shortlist_input=args.shortlist_input)
        tc = TrainConfig(epochs=args.epochs, minibatch=args.minibatch, learning_rate=args.learning_rate,
                         optimizer=args.optimizer, l2=args.l2, dropout=args.dropout,
                         input_dropout=args.input_dropout, threads=args.threads,
                         seed=args.seed, min_count=args.min_count, vocab_size=args.vocab_size,
                         max_halvings=args.max_halvings, time_limit=(args.time_limit or 0) * 60,
                         average=args.average)
        given = _given_options(args)
        cpus = os.cpu_count() or 1
        if args.threads > cpus:
            print(f"nplm: warning: --threads {args.threads} is more than this machine's {cpus} CPUs: "
                  "the extra Hogwild threads only add stale updates", file=sys.stderr)
        objective = config.resolved_objective()
        for option, dest, idle, why in (
                ("--classes", "classes", config.output != "class", "without --output class"),
                ("--clustering", "clustering", config.output != "class", "without --output class"),
                ("--noise-samples", "noise_samples", objective != "nce", "without --objective nce"),
                ("--variable-history", "variable_history", config.order == 2,
                 "at order 2 (every context is one word already)"),
                ("--full-history", "full_history", config.order == 2 or not config.variable_history,
                 "without variable history, or at order 2")):
            if dest in given and idle:
                print(f"nplm: warning: {option} has no effect {why}", file=sys.stderr)
        if args.resume and args.ensemble == 1:
            # the checkpoint's settings, but for the options given (which train() then
            # compares with it): resuming needs no repeat of the options it was made with
            old_config, old_tc = checkpoint_settings(args.out)
            config = dataclasses.replace(old_config, **{f.name: getattr(config, f.name)
                                                        for f in dataclasses.fields(config) if f.name in given})
            tc = dataclasses.replace(old_tc, **{f.name: getattr(tc, f.name)
                                                for f in dataclasses.fields(tc) if f.name in given})
        if args.ensemble > 1:
            return train_members(args, config, tc)
        train(args.train, args.valid, args.out, config, tc, resume=args.resume,
              log=output.log.info, progress=args.progress, keep_checkpoint=args.keep_checkpoint)
        return 0


@command("sample", "Sample sentences from a neural model (for distillation: nplm distil --sample-text)")
class Sample:
    OUTPUTS = ("out",)
    INPUTS = ("model",)

    @staticmethod
    def add_arguments(p):
        p.add_argument("model", help="neural nplm model (any output kind; drawn from its exact distribution)")
        p.add_argument("--tokens", type=int, required=True,
                       help="draw at least this many tokens (words plus one </s> per sentence): "
                            "sentences are started until that many are drawn, and every started one is "
                            "finished, so the text ends at a sentence boundary")
        p.add_argument("--out", required=True, help="output text, one sentence per line (written atomically; "
                       ".gz/.bz2/.xz compressed by extension; '-' for stdout)")
        p.add_argument("--seed", type=_nonneg_int, default=1, help="random seed (default 1)")
        p.add_argument("--max-length", type=int, default=100,
                       help="cut a sentence after this many words (default 100)")

    @staticmethod
    def run(args):
        if same_file(args.model, args.out):
            return _error(f"--out {args.out} would overwrite the model")
        n_sent, n_tok = sample_to_file(args.model, args.out, args.tokens, seed=args.seed,
                                       max_len=args.max_length, progress=args.progress)
        print(f"{n_sent} sentences, {n_tok} tokens written to {'stdout' if args.out == '-' else args.out}",
              file=sys.stderr)
        return 0


@command("precompute", "Store softmax normalisers of frequent contexts for fallback normalisation")
class Precompute:
    OUTPUTS = ("out",)
    INPUTS = ("text",)

    @staticmethod
    def add_arguments(p):
        p.add_argument("model", help="neural nplm model with softmax output (rewritten in place, atomically)")
        p.add_argument("--text", required=True, type=_input_file, help="training text whose contexts to count")
        p.add_argument("--min-count", type=int, default=2,
                       help="store contexts seen at least this often, at every order (default 2); "
                            "the one-word table always covers every word")
        p.add_argument("--out", help="write the result here instead of rewriting MODEL")

    @staticmethod
    def run(args):
        sizes = precompute(args.model, args.text, args.min_count, out=args.out)
        for k, n in enumerate(sizes):
            print(f"{k + 1}-gram contexts stored: {n}", file=sys.stderr)
        return 0


@command("distil", "Distil a model (neural, interpolated or back-off) into a normalised back-off ARPA table")
class Distil:
    OUTPUTS = ("arpa",)
    INPUTS = ("model", "text", "ngrams", "sample_text", "lower")

    @staticmethod
    def add_arguments(p):
        p.add_argument("model", help="teacher: any model nplm.Model loads (ARPA, nplm binary, interpolation spec)")
        p.add_argument("--text", type=_input_file, help="training text whose n-grams to list (one sentence per line)")
        p.add_argument("--ngrams", help="list the n-grams of this ARPA file (with or instead of --text)")
        p.add_argument("--order", "-o", type=int, required=True, help="order of the distilled table")
        p.add_argument("--arpa", required=True,
                       help="output: ARPA (.gz/.bz2/.xz compressed by extension; '-' for stdout), or an "
                            "nplm binary when the name ends in .nplm/.bin")
        Distil.add_defaults(p.add_argument_group("defaults (the README's recipe, chosen from the teacher)"))
        p.add_argument("--min-count", type=int, nargs="+", metavar="N",
                       help="count thresholds for the text's n-grams of orders 2..N (last one repeats)")
        p.add_argument("--sample-text", metavar="FILE", type=_input_file,
                       help="also list the n-grams of this text sampled from the teacher (nplm sample): "
                            "the likely unseen n-grams a training text cannot list")
        p.add_argument("--sample-min-count", type=int, nargs="+", metavar="N",
                       help="count thresholds for the sampled n-grams of orders 2..N (default 1 2 with a "
                            "pool drawn here, else 1)")
        p.add_argument("--top-k", type=_nonneg_int, default=0,
                       help="also list each text context's K most probable continuations (default 0: none)")
        p.add_argument("--top-k-min-count", type=int, default=2,
                       help="only for contexts seen at least this often (default 2)")
        p.add_argument("--threads", type=int, default=1,
                       help="threads scoring the teacher (only for teachers safe to share, e.g. back-off)")
        p.add_argument("-S", "--count-memory", type=_memory_size, metavar="SIZE",
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
        g.add_argument("--valid", type=_input_file, metavar="DEV",
                       help="validation text: the table's perplexity is reported beside the back-off model's, "
                            "and a mixture's weights are re-tuned per back-off context bucket on it "
                            "(default: the text the mixture was tuned on)")
        g.add_argument("--target-size", "--prune-to", dest="target_size", type=_positive_int, metavar="NGRAMS",
                       help="relative-entropy pruning to at most this many n-grams of orders >= 2 "
                            "(default: the back-off model's size)")
        g.add_argument("--no-prune", action="store_true", help="keep every listed n-gram")
        g.add_argument("--lower", default="auto",
                       help="model giving the probabilities of orders below --order (default auto: the "
                            "mixture's back-off model when a network lacks --variable-history; 'none': the teacher)")
        g.add_argument("--continuation", type=_positive_int, nargs="?", const=1, default=None, metavar="K",
                       help="shape the unigrams (orders 1..K with K, K below --order) for backing off: fitted to the "
                            "teacher's leftover mass of longer contexts (Kneser-Ney's idea, computed from the "
                            "teacher); default: on with a sampled pool; K > 1 measured worse on PTB")
        g.add_argument("--no-continuation", action="store_true", help="keep the teacher's unigrams")
        g.add_argument("--no-buckets", action="store_true",
                       help="keep a mixture's weights as they are (default: re-tuned per back-off bucket)")
        g.add_argument("--no-favour", action="store_true",
                       help="keep the teacher as it is (default, for a mixture with a validation text: "
                            "moved towards its back-off model as far as the validation text prefers)")
        g.add_argument("--sample-tokens", type=_nonneg_int, metavar="N",
                       help="sample exactly N tokens from the teacher's networks into the pool (0: none)")

    @staticmethod
    def run(args):
        if args.text is None and args.ngrams is None and args.sample_text is None:
            return _error("give --text, --ngrams and/or --sample-text: the n-grams to list")
        if args.continuation and args.continuation >= args.order:
            return _error(f"--continuation {args.continuation}: it reshapes orders below --order {args.order}, "
                          + (f"so at most {args.order - 1}" if args.order > 1 else "and an order-1 table has none"))
        with _plain_warnings():        # (a teacher without variable history; a table worse than its input)
            tables, report, plan = distil_auto_to_file(
                args.model, args.arpa, args.order, args.text, quality=args.quality, valid=args.valid,
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
        for note in plan.notes if args.quiet else ():
            print(f"nplm distil: {note}", file=sys.stderr)
        print("n-grams: " + " ".join(f"{k + 1}={c}" for k, c in enumerate(tables.counts)), file=sys.stderr)
        if report is not None:
            print(report.line(), file=sys.stderr)
        if report is not None and report.worse:
            bar = "!" * 78
            print(f"{bar}\nnplm distil: WARNING: the table is worse than its back-off input "
                  f"({report.table:.2f} > {report.backoff:.2f}); the options above make it better\n{bar}",
                  file=sys.stderr)
        return 0


def _is_stream(path):
    """Whether ``path`` is stdin, a pipe, a FIFO or a device: readable once, so its
    format is sniffed from the one stream that then reads it."""
    if path == "-":
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode) and not os.path.isdir(path)
    except OSError:
        return False


@command("convert", "Convert between ARPA, nplm back-off/neural binaries, float16/int8 neural and ISI NPLM; "
         "KenLM binaries to ARPA")
class Convert:
    OUTPUTS = ("output",)
    INPUTS = ("input", "text")

    @staticmethod
    def add_arguments(p):
        p.add_argument("input", help="model file (format detected from its content); '-': an ARPA file "
                       "(plain or compressed) on stdin")
        p.add_argument("output", help="output file (written atomically; never the input); '-': ARPA "
                       "text to stdout")
        p.add_argument("--to", choices=["arpa", "binary", "neural", "float16", "int8", "isi"],
                       help="output format (default: from the output name: .arpa[.gz|.bz2|.xz] ARPA, "
                            ".isi/.nnlm ISI, .nplm/.bin nplm binary (float32 for a neural model); "
                            "else the input's counterpart)")
        p.add_argument("--text", type=_input_file, help="neural models: report the perplexity change on this text (an ISI "
                       "output is read back as nplm reads it); refused for back-off conversions")

    @staticmethod
    def run(args):
        if "-" in (args.input, args.output) or _is_stream(args.input):
            return Convert.stdio(args)
        sf, tf, report = convert(args.input, args.output, to=args.to, text=args.text,
                                 messages=lambda m: print(f"nplm: {m}", file=sys.stderr))
        msg = f"{sf} -> {tf}"
        if "bytes_after" in report:
            msg += f", {report['bytes_before']} -> {report['bytes_after']} bytes"
        if "perplexity_after" in report:
            msg += (f", perplexity {report['perplexity_before']:.3f} -> {report['perplexity_after']:.3f} "
                    f"({100 * report['perplexity_change']:+.3f}%)")
        print(msg, file=sys.stderr)
        return 0

    @staticmethod
    def stdio(args):
        """'-' as the input (stdin) or the output (stdout): a stream carries ARPA text
        only.  Stdin can be read once, so it is not sniffed for its format first; a
        binary is memory-mapped from a file, so it cannot go to a pipe."""
        stream = None
        if _is_stream(args.input):
            kind, stream = sniff(args.input)
            if kind != "arpa":
                stream.close()
                raise ValueError(f"{args.input}: a {kind} binary is memory-mapped, so it must be a regular "
                                 "file, not a pipe; a stream carries ARPA text only")
        sf = "arpa" if stream is not None else detect(args.input)
        if sf not in ("arpa", "binary", "kenlm"):
            raise ValueError(f"{args.input} is a {sf} model: '-' (stdout) takes ARPA text only; give "
                             "the output a file name")
        tf = target_format(sf, args.output, args.to)
        if tf not in ("arpa", "binary"):
            raise ValueError(f"cannot convert {sf} to {tf}: a back-off model converts to arpa or binary")
        if tf != "arpa":
            refuse_stdout(args.output, hint=" (or --to arpa for ARPA text)")
        if args.text is not None:
            raise ValueError(f"--text measures the perplexity change of a neural model's conversion; "
                             f"{sf} -> {tf} changes no value")
        if stream is not None:
            with stream:
                tables = read_arpa(args.input, stream=stream)
        else:
            tables = read_arpa(args.input) if sf == "arpa" else backoff_tables(args.input, sf)
        if tf == "arpa":
            write_arpa(tables, args.output)
        else:
            build_binary(tables, args.output)
        print(f"{sf} -> {tf}", file=sys.stderr)
        return 0


@command("reproduce", "Run the whole PTB pipeline (KN, neural, interpolation, distillation, "
         "quantisation) and write a Markdown report with plots")
class Reproduce:
    @staticmethod
    def add_arguments(p):
        p.add_argument("--data", required=True, help="directory with ptb.train.txt, ptb.valid.txt, ptb.test.txt")
        p.add_argument("--out", required=True, help="output directory: report.md, results.json, plots, models/")
        p.add_argument("--quick", action="store_true",
                       help="small subset and tiny networks: checks the pipeline in a few minutes")
        p.add_argument("--neural-minutes", type=float,
                       help="training time per neural model (default 8; quick: 0.5)")
        p.add_argument("--threads", type=int, default=2, help="threads for training and tuning (default 2)")
        p.add_argument("--reuse", action="store_true",
                       help="keep neural models already in OUT/models that were trained with the same "
                            "configuration (their recorded training time is reported)")
        p.add_argument("--only", action="append", metavar="STAGE",
                       help="run only stages whose name starts with this (repeatable; one of data, KN1, KN3, "
                            "KN5, 'kenlm reference', 'Vaswani NCE', 'Baltescu class NCE', 'V-NNLM fallback', "
                            "'interpolate linear', 'interpolate loglinear', distil, 'quantise float16', "
                            "'quantise int8', or a beginning such as interpolate). report.md and "
                            "results.json then hold only these stages: they replace an earlier run's "
                            "(use another --out to keep it)")

    @staticmethod
    def run(args):
        s = Settings.quick_preset() if args.quick else Settings.full_preset()
        if args.neural_minutes is not None:
            if not args.neural_minutes > 0:
                return _error(f"--neural-minutes must be positive, not {args.neural_minutes}")
            s.neural_minutes = args.neural_minutes
        s.threads = args.threads
        s.reuse = args.reuse
        if not os.path.isdir(args.data):
            return _error(f"--data {args.data}: no such data directory")
        missing = [f for f in PTB_FILES if not os.path.isfile(os.path.join(args.data, f))]
        if missing:
            return _error(f"--data {args.data}: no {', '.join(missing)} there (the PTB text files)")
        command = "nplm reproduce " + shlex.join(args._argv[1:] if args._argv[:1] == ["reproduce"]
                                                 else args._argv)
        run = reproduce(args.data, args.out, s, only=set(args.only) if args.only else None, command=command)
        failed = [st.name for st in run.stages if st.status != "ok"]
        if failed:
            print(f"stages not available: {', '.join(failed)} (see {os.path.join(args.out, 'report.md')})",
                  file=sys.stderr)
        return 0 if run.stages and run.stages[0].status == "ok" else 1


@command("verify", "Check model files completely: every array's checksum and a full load (an "
         "interpolation spec: each component, then the mixture)")
class Verify:
    @staticmethod
    def add_arguments(p):
        p.add_argument("models", nargs="+", help="model files (nplm binaries, ARPA, interpolation specs)")

    @staticmethod
    def run(args):
        failed = 0
        for path in args.models:
            if path == "-":
                print("nplm: error: verify needs a model's file name, not '-': a model is checked "
                      "(and memory-mapped) from its file, not read from stdin", file=sys.stderr)
                failed += 1
                continue
            try:
                print(f"{path}: {verify(path)}")
            except Unreadable as e:       # nothing known about the content: not "damaged"
                print(f"{path}: {e.label}: {e}", file=sys.stderr)
                failed += 1
            except (OSError, ValueError) as e:
                print(f"{path}: DAMAGED: {e}", file=sys.stderr)
                failed += 1
        return 1 if failed else 0


# Commands defined in their own modules
command("rescore", Rescore.HELP)(Rescore)
command("ensemble", Ensemble.HELP)(Ensemble)
