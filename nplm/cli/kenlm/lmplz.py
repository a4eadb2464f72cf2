"""lmplz: estimate a modified Kneser-Ney model from text, as KenLM's lmplz does, with
its command line (boost's rules, see _options), its ARPA bytes and its exit codes."""

import sys

from nplm.cli.kenlm import _options as po
from nplm.cli.kenlm._estimate import run_estimate
from nplm.cli.kenlm._program import fail, program

CITATION = """\
Builds unpruned language models with modified Kneser-Ney smoothing.

Please cite:
@inproceedings{Heafield-estimate,
  author = {Kenneth Heafield and Ivan Pouzyrevsky and Jonathan H. Clark and Philipp Koehn},
  title = {Scalable Modified {Kneser-Ney} Language Model Estimation},
  year = {2013},
  month = {8},
  booktitle = {Proceedings of the 51st Annual Meeting of the Association for Computational Linguistics},
  address = {Sofia, Bulgaria},
  url = {http://kheafield.com/professional/edinburgh/estimate\\_paper.pdf},
}

Provide the corpus on stdin.  The ARPA file will be written to stdout.  Order of
the model (-o) is the only mandatory option.  As this is an on-disk program,
setting the temporary file location (-T) and sorting memory (-S) is recommended.

Memory sizes are specified like GNU sort: a number followed by a unit character.
Valid units are % for percentage of memory (supported platforms only) and (in
increasing powers of 1024): b, K, M, G, T, P, E, Z, Y.  Default is K (*1024).
"""

# options that tune lmplz's streaming sort; nplm sizes its own buffers from -S
SPEED_ONLY = ("minimum_block", "sort_block", "block_count", "vocab_estimate")


def parser():
    O = po.Option
    u64 = po.to_unsigned(64)
    return po.Parser("Language model building options", [
        O("help", "h", "switch", help="Show this help message"),
        O("order", "o", convert=u64, required=True, help="Order of the model"),
        O("interpolate_unigrams", convert=po.to_bool, default=True, implicit=True, help=(
            "Interpolate the unigrams (default) as opposed to giving lots of mass to <unk> like SRI.  If you "
            "want SRI's behavior with a large <unk> and the old lmplz default, use --interpolate_unigrams 0.")),
        O("skip_symbols", kind="switch",
          help="Treat <s>, </s>, and <unk> as whitespace instead of throwing an exception"),
        O("temp_prefix", "T", default=po.default_temp_prefix(), help="Temporary file prefix"),
        O("memory", "S", default="80%" if po.physical_memory() else "1G", help="Sorting memory"),
        O("minimum_block", default="8K", help="Minimum block size to allow"),
        O("sort_block", default="64M", help="Size of IO operations for sort (determines arity)"),
        O("block_count", convert=u64, default=2, help="Block count (per order)"),
        O("vocab_estimate", convert=po.to_unsigned(32), default=1000000, help=(
            "Assume this vocabulary size for purposes of calculating memory in step 1 (corpus count) and "
            "pre-sizing the hash table")),
        O("vocab_pad", convert=u64, default=0, help=(
            "If the vocabulary is smaller than this value, pad with <unk> to reach this size. Requires "
            "--interpolate_unigrams")),
        O("verbose_header", kind="switch", help=(
            "Add a verbose header to the ARPA file that includes information such as token count, "
            "smoothing type, etc.")),
        O("text", help="Read text from a file instead of stdin"),
        O("arpa", help="Write ARPA to a file instead of stdout"),
        O("intermediate", help=(
            "Write ngrams to intermediate files.  Turns off ARPA output (which can be reactivated by --arpa "
            "file).  Forces --renumber on.")),
        O("renumber", kind="switch", help=(
            "Renumber the vocabulary identifiers so that they are monotone with the hash of each string.  "
            "This is consistent with the ordering used by the trie data structure.")),
        O("collapse_values", kind="switch", help=(
            "Collapse probability and backoff into a single value, q that yields the same sentence-level "
            "probabilities.  See http://kheafield.com/professional/edinburgh/rest_paper.pdf for more "
            "details, including a proof.")),
        O("prune", kind="multi", help=(
            "Prune n-grams with count less than or equal to the given threshold.  Specify one value for each "
            "order i.e. 0 0 1 to prune singleton trigrams and above.  The sequence of values must be "
            "non-decreasing and the last value applies to any remaining orders. Default is to not prune, "
            "which is equivalent to --prune 0.")),
        O("limit_vocab_file", default="", default_text="", help=(
            "Read allowed vocabulary separated by whitespace. N-grams that contain vocabulary items not in "
            "this list will be pruned. Can be combined with --prune arg")),
        O("discount_fallback", kind="multi", implicit=["0.5", "1", "1.5"], implicit_text="0.5 1 1.5", help=(
            "The closed-form estimate for Kneser-Ney discounts does not work without singletons or "
            "doubletons.  It can also fail if these values are out of range.  This option falls back to "
            "user-specified discounts when the closed-form estimate fails.  Note that this option is "
            "generally a bad idea: you should deduplicate your corpus instead.  However, class-based models "
            "need custom discounts because they lack singleton unigrams.  Provide up to three discounts (for "
            "adjusted counts 1, 2, and 3+), which will be applied to all orders where the closed-form "
            "estimates fail.")),
    ])


def usage(p):
    mem = po.physical_memory()
    machine = (f"This machine has {mem} bytes of memory.\n\n" if mem
               else "Unable to determine the amount of memory on this machine.\n\n")
    return CITATION + machine + p.format() + "\n"


def _cast_float(word):
    """boost::lexical_cast<float>: the whole word must be a number."""
    try:
        if word.strip() != word or word.lower().lstrip("+-") in ("inf", "infinity", "nan"):
            raise ValueError
        return float(word)
    except ValueError:
        raise ValueError("bad lexical cast: source type value could not be interpreted as target") from None


def discount_fallback(words):
    """lmplz's ParseDiscountFallback: up to three discounts, the last repeated."""
    if len(words) > 3:
        raise ValueError("Specify at most three fallback discounts: 1, 2, and 3+")
    if not words:
        raise ValueError("Fallback discounting enabled, but no discount specified")
    out = []
    for i in range(3):
        d = _cast_float(words[min(i, len(words) - 1)])
        if not 0.0 <= d <= i + 1:
            raise ValueError(f"The discount for count {i + 1} was parsed as {d:g} which is not in the range "
                             f"[0, {i + 1}].")
        out.append(d)
    return out


def pruning(words, order):
    """lmplz's ParsePruning: integers, at most one per order, non-decreasing."""
    values = []
    for w in words or ():
        if not w.isdigit():
            raise ValueError(f"Bad pruning threshold {w}")
        values.append(int(w))
    if len(values) > order:
        raise ValueError(f"You specified pruning thresholds for orders 1 through {len(values)} but the model "
                         f"only has order {order}")
    if values != sorted(values):
        raise ValueError("Pruning thresholds should be in non-decreasing order.  Otherwise substrings would be "
                         "removed, which is bad for query-time data structures.")
    return values or None


def settings(p, argv):
    """The estimate's keyword arguments from lmplz's command line (help printed: None)."""
    given = p.store(argv)
    if not argv or given.get("help"):
        sys.stderr.write(usage(p))
        return None
    v = p.notify(given)
    memory = po.parse_size(v["memory"])
    for name in ("minimum_block", "sort_block"):
        po.parse_size(v[name])
    if v["vocab_pad"] and not v["interpolate_unigrams"]:
        raise fail("--vocab_pad requires --interpolate_unigrams be on")
    # (KenLM's lmplz forces --renumber on for --intermediate)
    renumber = v["renumber"] or "intermediate" in given
    if renumber and v["limit_vocab_file"]:
        flag = "intermediate" if "intermediate" in given else "renumber"
        raise fail(f"--limit_vocab_file cannot be combined with --{flag}: KenLM's lmplz aborts on it "
                   "(\"Detected n-gram without matching suffix\") or writes a model without </s>")
    ignored = [f"--{n}" for n in SPEED_ONLY if n in given]
    if ignored:
        print(f"lmplz: {', '.join(ignored)} only tune KenLM's buffers; ignored here", file=sys.stderr)
    return dict(order=v["order"], memory=memory, temp_prefix=po.normalize_temp_prefix(v["temp_prefix"]),
                discount_fallback=discount_fallback(v["discount_fallback"]) if "discount_fallback" in given
                else None, prune=pruning(v["prune"], v["order"]),
                interpolate_unigrams=v["interpolate_unigrams"], skip_symbols=v["skip_symbols"],
                verbose_header=v["verbose_header"], vocab_pad=v["vocab_pad"],
                limit_vocab_file=v["limit_vocab_file"] or None,
                text=v["text"], arpa=v["arpa"], intermediate=v["intermediate"], renumber=renumber,
                collapse_values=v["collapse_values"])


@program("lmplz")
def main(argv=None):
    s = settings(parser(), sys.argv[1:] if argv is None else argv)
    if s is None:
        return 1
    return run_estimate(s)


if __name__ == "__main__":
    sys.exit(main())
