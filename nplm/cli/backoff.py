"""``nplm build-binary``, ``estimate`` and ``count``: back-off models from ARPA files and text."""


from nplm.backoff import binary as backoff
from nplm.backoff.estimate import DEFAULT_MEMORY, estimate
from nplm.backoff.estimate.counts import count_to_file, merge_files
from nplm.backoff.kenlm import write as kenlm_write
from nplm.cli.common import command, error, input_file, input_files, lmplz_bool, memory_size, one_or_list, plain_warnings
from nplm.io.atomic import check_output, refuse_stdout, same_file
from nplm.io.resources import arpa_header_counts


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
                return error(f"-p: {e}")
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
        with plain_warnings():         # (an ARPA that lists an entry again)
            kenlm_write.build_binary_from_arpa(source, out, kind, progress=args.progress, **options)
        return 0




@command("estimate", "Estimate a modified Kneser-Ney model from text, like KenLM's lmplz")
class Estimate:
    OUTPUTS = ("arpa", "binary")
    NON_ARPA_OUTPUTS = ("binary",)
    INPUTS = ("text", "limit_vocab_file")

    @staticmethod
    def add_arguments(p):
        p.add_argument("-o", "--order", type=int, required=True, help="order of the model")
        p.add_argument("--text", nargs="+", default=["-"], type=input_files,
                       help="training text, one sentence per line (default stdin; plain, gzip, bz2 "
                       "or xz); several files or glob patterns are read in turn as one text")
        p.add_argument("--counts", nargs="+", type=input_file, metavar="FILE",
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
        p.add_argument("--interpolate_unigrams", "--interpolate-unigrams", type=lmplz_bool,
                       nargs="?", const=True, default=True, metavar="0|1",
                       help="interpolate unigrams with the uniform distribution (default 1); "
                       "0 gives the mass to <unk> as SRILM does")
        p.add_argument("--limit_vocab_file", "--limit-vocab-file", type=input_file,
                       help="prune n-grams with words not listed (whitespace-separated) in this file")
        p.add_argument("--skip_symbols", "--skip-symbols", action="store_true",
                       help="treat <s>, </s> and <unk> in the text as whitespace")
        p.add_argument("--verbose_header", "--verbose-header", action="store_true",
                       help="add input file, token count and smoothing comments to the ARPA")
        p.add_argument("--vocab_pad", "--vocab-pad", type=int, default=0,
                       help="spread unigram interpolation mass as if the vocabulary had this many words")
        p.add_argument("-S", "--memory", type=memory_size, default=DEFAULT_MEMORY,
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
        with plain_warnings():
            text = None if args.counts else one_or_list(args.text)
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
        p.add_argument("--text", nargs="+", default=["-"], type=input_files,
                       help="text, one sentence per line (default stdin; plain, gzip, bz2 or xz); "
                       "several files or glob patterns are read in turn as one text")
        p.add_argument("--merge", nargs="+", type=input_file, metavar="COUNTS",
                       help="merge these counts files (shards, in this order) instead of counting")
        p.add_argument("--output", required=True, help="the counts file to write")
        p.add_argument("--skip_symbols", "--skip-symbols", action="store_true",
                       help="treat <s>, </s> and <unk> in the text as whitespace")
        p.add_argument("-S", "--memory", type=memory_size, default=DEFAULT_MEMORY,
                       help="memory budget while counting (as estimate's -S)")
        p.add_argument("-T", "--temp_prefix", "--temp-prefix", help="folder for temporary files")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")

    @staticmethod
    def run(args):
        if args.merge:
            merge_files(args.merge, args.output)
            return 0
        if args.order is None:
            return error("give the order (-o) to count")
        count_to_file(one_or_list(args.text), args.order, args.output, skip_symbols=args.skip_symbols,
                      memory=args.memory, temp_prefix=args.temp_prefix, progress=not args.quiet)
        return 0
