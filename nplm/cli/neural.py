"""``nplm train``, ``sample``, ``precompute`` and ``cluster``: neural models and word classes."""
import argparse
import dataclasses
import importlib
import os
import sys

from nplm.cli import output
from nplm.cli.combine import train_members
from nplm.cli.common import (
    command,
    error,
    given_options,
    input_file,
    input_files,
    nonneg_int,
    positive_int,
    positive_minutes,
)
from nplm.io.atomic import check_output, same_file
from nplm.neural import clusters
from nplm.neural.network import NeuralConfig
from nplm.neural.query import precompute
from nplm.neural.sample import sample_to_file
from nplm.neural.stream import expand_paths
from nplm.neural.train import TrainConfig, checkpoint_settings, train


@command("cluster", "Word classes from text: Brown (exchange) clustering or frequency binning")
class Cluster:
    OUTPUTS = ("output",)
    INPUTS = ("text",)

    @staticmethod
    def add_arguments(p):
        p.add_argument("--text", default="-", type=input_file, help="training text, one sentence per line "
                       "(default stdin; plain, gzip, bz2 or xz); </s> ends every line")
        p.add_argument("-c", "--classes", type=int, required=True, help="number of classes")
        p.add_argument("-o", "--out", "--output", dest="output", default="-",
                       help="write word<TAB>class<TAB>count lines here (.gz/.bz2/.xz compressed by "
                       "extension; default stdout)")
        p.add_argument("--method", choices=["brown", "frequency"], default="brown",
                       help="brown: maximise class-bigram likelihood (default); "
                       "frequency: sqrt-frequency bins")
        p.add_argument("--iterations", type=int, default=20, help="most exchange passes (default 20)")
        p.add_argument("--seed", type=nonneg_int, default=0, help="tie-breaking seed (default 0)")

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




@command("train", "Train a feed-forward neural n-gram model (NCE, class/tree-factored or full softmax)")
class Train:
    """Options mirror nplm.neural.NeuralConfig and nplm.train.TrainConfig; their defaults
    are the recommended PTB model."""
    OUTPUTS = ("out",)
    NON_ARPA_OUTPUTS = ("out",)
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
        g.add_argument("--train", required=True, nargs="+", type=input_files,
                       help="training text, one sentence per line (plain/gz/bz2/xz); --engine torch reads "
                            "several files or glob patterns, streamed and shared among its processes")
        g.add_argument("--valid", type=input_file, help="validation text: perplexity per epoch, learning-rate halving, "
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
        g.add_argument("--classes", type=positive_int, default=n.classes,
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
        g.add_argument("--shortlist", type=nonneg_int, default=n.shortlist, metavar="N",
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
        g.add_argument("--time-limit", type=positive_minutes, default=None,
                       help="stop after the epoch that passes this many minutes (default: none)")
        g.add_argument("--average", type=float, default=t.average,
                       help="validate and save a moving average of the weights with this time constant in "
                            f"epochs; 0 for the raw weights (default {t.average})")
        g.add_argument("--threads", type=int, default=t.threads, help=f"CPU threads (default {t.threads})")
        g.add_argument("--seed", type=nonneg_int, default=t.seed,
                       help="random seed; with --threads 1 the same seed gives the same model bytes")
        g.add_argument("--resume", action="store_true", help="continue from OUT.ckpt")
        g.add_argument("--ensemble", type=positive_int, default=1, metavar="K",
                       help="train K networks with seeds SEED, SEED+1, ... (saved as OUT.m0.nplm, ...) and "
                            "write their linear ensemble, tuned on --valid, to OUT (a JSON spec)")
        g.add_argument("--keep-checkpoint", action="store_true",
                       help="keep OUT.ckpt after training succeeds (default: removed)")
        g = p.add_argument_group("engine")
        g.add_argument("--engine", choices=["cython", "torch"], default="cython",
                       help="cython: nplm's CPU kernels (default); torch: PyTorch on CPU or CUDA, one process or "
                            "several under torchrun (needs nplm[torch]; docs/guide/gpu-training.md)")
        g.add_argument("--device", choices=["cpu", "cuda"], default=None,
                       help="with --engine torch: where to train (default cpu; under torchrun each process "
                            "takes the GPU of its LOCAL_RANK)")
        g.add_argument("--shuffle-buffer", type=positive_int, default=None, metavar="N",
                       help="with --engine torch: examples each process shuffles together (default 1048576)")
        g.add_argument("--checkpoint-minutes", type=float, default=None, metavar="M",
                       help="with --engine torch: also write OUT.ckpt every M minutes within an epoch, to "
                            "resume from there (default 30; 0: at epoch ends only)")

    @staticmethod
    def run(args):  # long: checks each option against the engine and the checkpoint in turn
        try:
            args.train = expand_paths(args.train)
        except FileNotFoundError as e:
            return error(f"--train: {e.strerror}: {e.filename}")
        for src in args.train + [args.valid]:
            if src and same_file(src, args.out):
                return error(f"--out {args.out} would overwrite an input file")
        problem = engine_problem(args)
        if problem:
            return error(problem)
        check_output(args.out + ".ckpt")   # written after each epoch
        try:
            hidden = tuple(int(h) for h in args.hidden.replace(" ", "").split(",") if h)
        except ValueError:
            return error(f"--hidden takes comma-separated sizes such as 750,150, not {args.hidden!r}")
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
        given = given_options(args)
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
        if args.engine == "torch":
            return train_torch(args, config, tc)
        args.train = args.train[0]
        if args.ensemble > 1:
            return train_members(args, config, tc)
        train(args.train, args.valid, args.out, config, tc, resume=args.resume,
              log=output.log.info, progress=args.progress, keep_checkpoint=args.keep_checkpoint)
        return 0


TORCH_ONLY = (("--device", "device"), ("--shuffle-buffer", "shuffle_buffer"),
              ("--checkpoint-minutes", "checkpoint_minutes"))


def engine_problem(args):
    """The one-line refusal of an option the chosen engine does not take, or None."""
    if args.engine == "cython":
        if len(args.train) > 1:
            return ("--train: the cython engine reads one training file, not "
                    f"{len(args.train)}; concatenate them, or use --engine torch")
        for option, dest in TORCH_ONLY:
            if getattr(args, dest) is not None:
                return f"{option} needs --engine torch"
        return None
    if args.tie_embeddings:
        return "--tie-embeddings is not supported by --engine torch; use --engine cython"
    if args.ensemble > 1:
        return "--ensemble is not supported by --engine torch; train the members one by one"
    if args.checkpoint_minutes is not None and not (args.checkpoint_minutes >= 0):
        return f"--checkpoint-minutes must be a non-negative number of minutes, not {args.checkpoint_minutes}"
    return None


def train_torch(args, config, tc):
    """nplm train --engine torch (PyTorch imported only here)."""
    try:
        torch_engine = importlib.import_module("nplm.neural.torch_engine")
    except ImportError as e:
        return error(f"--engine torch needs PyTorch ({e}); install it with: pip install 'nplm[torch]'")
    opts = torch_engine.TorchOptions()
    for _, dest in TORCH_ONLY:
        if getattr(args, dest) is not None:
            setattr(opts, dest, getattr(args, dest))
    torch_engine.train(args.train, args.valid, args.out, config, tc, opts, resume=args.resume,
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
        p.add_argument("--seed", type=nonneg_int, default=1, help="random seed (default 1)")
        p.add_argument("--max-length", type=int, default=100,
                       help="cut a sentence after this many words (default 100)")

    @staticmethod
    def run(args):
        if same_file(args.model, args.out):
            return error(f"--out {args.out} would overwrite the model")
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
        p.add_argument("--text", required=True, type=input_file, help="training text whose contexts to count")
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
