"""``nplm query`` and ``nplm perplexity``: scoring text."""
import sys

from nplm import Model
from nplm.cli.common import (
    add_normalization,
    add_text_argument,
    command,
    error,
    is_arpa,
    open_input_lines,
    plain_warnings,
    query_levels,
    text_of,
)
from nplm.evaluate import evaluate, kenlm_floats
from nplm.io.text import faithful_stdout, split_words
from nplm.model import quiet_config


@command("query", "Score text like KenLM's query: per-word output and a perplexity summary")
class Query:
    @staticmethod
    def add_arguments(p):
        p.add_argument("model", help="any model: ARPA file (plain/.gz/.bz2/.xz), KenLM binary (probing, trie), "
                                       "nplm back-off or neural binary, or interpolation spec")
        add_text_argument(p, "text to score, one sentence per line (default stdin)")
        p.add_argument("-n", dest="no_context", action="store_true",
                       help="do not wrap each line in <s> and </s>")
        p.add_argument("-v", dest="verbosity", action="append", metavar="LEVEL",
                       choices=["summary", "sentence", "word", "0", "1", "2"],
                       help="summary|sentence|word: print this output (repeatable: -v summary -v word); "
                            "2: all three, 1: sentence and summary, 0: summary only (default: all three). "
                            "As in KenLM, word output alone ends no line")
        add_normalization(p)

    @staticmethod
    def run(args):
        levels = query_levels(args.verbosity)
        # KenLM's advice to build a binary, once the ARPA has loaded: a file that is
        # missing or no model gets its error alone.
        with plain_warnings():         # (an ARPA that lists an entry again)
            model = Model(args.model, quiet_config(), normalization=args.normalization)
        if is_arpa(args.model):
            print("Loading the LM will be faster if you build a binary file.", file=sys.stderr)
        out = faithful_stdout()
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

        with open_input_lines(text_of(args)) as f:
            stats = evaluate(model, f, context, per_line if levels & {"word", "sentence"} else None)
        if "summary" in levels:
            out.write(stats.summary())
        return 0


@command("perplexity", "Corpus perplexity of a text (including and excluding OOVs)")
class Perplexity:
    @staticmethod
    def add_arguments(p):
        p.add_argument("model", help="any model: ARPA file, KenLM binary, nplm back-off or neural binary, or "
                                       "interpolation spec")
        add_text_argument(p, "text file, one sentence per line ('-' for stdin; may be compressed)", required=True)
        add_normalization(p)

    @staticmethod
    def run(args):
        model = Model(args.model, quiet_config(), normalization=args.normalization)
        with open_input_lines(text_of(args)) as f:
            stats = evaluate(model, f)
        if not stats.tokens:
            return error(f"{text_of(args)}: no sentence to score (the text is empty)")
        sys.stdout.write(stats.summary())
        return 0
