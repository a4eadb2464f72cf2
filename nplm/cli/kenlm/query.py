"""query: KenLM's query program (lm/query_main.cc, lm/ngram_query.hh) over any model
nplm loads.  Standard input is read as bytes and split into words at ASCII white
space, as KenLM's FilePiece does; the output is KenLM's byte for byte, including its
two edge cases: a last line without a newline is scored word by word but gets no </s>
and no Total line (its words count as tokens only), and ``-n`` prints a bare Total line
for an empty line."""

import getopt
import resource
import sys
import time

import numpy as np

from nplm._kernels import segment_sums
from nplm.backoff.kenlm.reader import is_kenlm_binary, read_layout
from nplm.cli.kenlm._program import fail, program
from nplm.evaluate import CorpusStats, kenlm_floats
from nplm.io.files import sniff
from nplm.io.text import split_words, word_str
from nplm.model import LoadMethod, Model, quiet_config

MAX_ORDER = 6       # as the PyPI kenlm build reports it in the usage text
USAGE = (f"KenLM was compiled with maximum order {MAX_ORDER}.\n"
         "Usage: query [-b] [-n] [-w] [-s] lm_file\n"
         "-b: Do not buffer output.\n"
         "-n: Do not wrap the input in <s> and </s>.\n"
         "-v summary|sentence|word: Print statistics at this level.\n"
         "   Can be used multiple times: -v summary -v sentence -v word\n"
         "-l lazy|populate|read|parallel: Load lazily, with populate, or malloc+read\n"
         "The default loading method is populate on Linux and read on others.\n\n"
         "Each word in the output is formatted as:\n"
         "  word=vocab_id ngram_length log10(p(word|context))\n"
         "where ngram_length is the length of n-gram matched.  A vocab_id of 0 indicates\n"
         "the unknown word. Sentence-level output includes log10 probability of the\n"
         "sentence and OOV count.\n")
LEVELS = {"2": {"word", "sentence", "summary"}, "1": {"sentence", "summary"}, "0": {"summary"},
          "word": {"word"}, "sentence": {"sentence"}, "summary": {"summary"}}
LOAD = {"lazy": LoadMethod.LAZY, "populate": LoadMethod.POPULATE_OR_READ, "read": LoadMethod.READ,
        "parallel": LoadMethod.PARALLEL_READ}
BATCH = 8192


def parse(argv):
    """(levels, sentence_context, flush, load_method, model path) from query's getopt
    options, or the usage text as a failure."""
    if not argv or argv == ["--help"]:
        raise fail(USAGE.rstrip("\n"))
    try:
        opts, rest = getopt.gnu_getopt(argv, "bnv:l:")     # GNU getopt permutes, as glibc does
    except getopt.GetoptError as e:        # glibc getopt's wording
        why = "option requires an argument" if "requires argument" in e.msg else "invalid option"
        raise fail(f"query: {why} -- '{e.opt}'\n{USAGE}".rstrip("\n")) from None
    levels, context, flush, load = set(), True, False, LoadMethod.POPULATE_OR_READ
    for flag, value in opts:
        if flag == "-b":
            flush = True
        elif flag == "-n":
            context = False
        elif flag == "-v" and value in LEVELS:
            levels = set(LEVELS[value]) if value in "012" else levels | LEVELS[value]
        elif flag == "-l" and value in LOAD:
            load = LOAD[value]
        else:
            raise fail(USAGE.rstrip("\n"))
    if len(rest) != 1:
        raise fail(USAGE.rstrip("\n"))
    return levels or set(LEVELS["2"]), context, flush, load, rest[0]


def announce(path):
    """What KenLM's query says on stderr before it reads the text."""
    if is_kenlm_binary(path):
        print(f"This binary file contains {read_layout(path)[0].model_name}.", file=sys.stderr)
        return
    kind, stream = sniff(path)
    stream.close()
    if kind == "arpa":
        print("Loading the LM will be faster if you build a binary file.\nReading " + path + "\n"
              "----5---10---15---20---25---30---35---40---45---50---55---60---65---70---75---80---85---90---95--100\n"
              + "*" * 100, file=sys.stderr)


class Printer:
    """KenLM's QueryPrinter: word items, Total lines and the summary, as bytes."""

    def __init__(self, model, levels, context, flush):
        self.out = sys.stdout.buffer
        self.vocab = model.vocab
        self.eos = self.vocab.id("</s>")
        self.words, self.lines = "word" in levels, "sentence" in levels
        self.summary = "summary" in levels
        self.context, self.flush = context, flush

    def line(self, words, probs, lengths, oovs, total, finished):
        parts = []
        if self.words:
            shown = kenlm_floats(probs)
            ids = [self.vocab.id(w) for w in words]
            parts = [b"%s=%d %d %s\t" % (w.encode("utf-8", "surrogateescape"), i, n, p.encode())
                     for w, i, n, p in zip(words, ids, lengths, shown)]
            if finished and self.context:
                parts.append(b"</s>=%d %d %s\t" % (self.eos, lengths[-1], shown[-1].encode()))
        if finished and self.lines:
            parts.append(b"Total: %s OOV: %d\n" % (kenlm_floats([total])[0].encode(), int(oovs.sum())))
        if parts:
            self.out.write(b"".join(parts))
            if self.flush:
                self.out.flush()


def score(model, printer, stdin, context):
    """Score stdin line by line in batches; the corpus totals KenLM's way."""
    stats, oov_only = CorpusStats(), []
    pending = []
    for raw in stdin:
        pending.append(raw)
        if len(pending) == BATCH:
            _batch(model, printer, pending, context, stats, oov_only)
            pending = []
    _batch(model, printer, pending, context, stats, oov_only)
    stats.log10_prob_oov = float(np.cumsum(np.concatenate(([0.0], np.asarray(oov_only, dtype=np.float64))))[-1])
    return stats


def _batch(model, printer, raws, context, stats, oov_only):
    if not raws:
        return
    last_open = not raws[-1].endswith(b"\n")
    done = raws[:-1] if last_open else raws
    lines = [word_str(r.rstrip(b"\n")) for r in done]
    if lines:
        probs, lengths, oovs, offsets = model.full_scores_batch(lines, context, context)
        totals = segment_sums(probs, np.asarray(offsets, dtype=np.int64))
        for i, line in enumerate(lines):
            a, b = offsets[i], offsets[i + 1]
            printer.line(split_words(line), probs[a:b], lengths[a:b], oovs[a:b], totals[i], True)
        stats.log10_prob = float(np.cumsum(np.concatenate(([stats.log10_prob], totals.astype(np.float64))))[-1])
        stats.tokens += int(len(probs))
        stats.oovs += int(oovs.sum())
        oov_only.extend(probs[oovs].tolist())
    if last_open:
        # KenLM's "no newline after the last query": words only, no </s>, no Total;
        # its tokens count, its OOVs' probabilities too, its total does not
        line = word_str(raws[-1])
        probs, lengths, oovs, _ = model.full_scores_batch([line], context, False)
        printer.line(split_words(line), probs, lengths, oovs, 0.0, False)
        stats.tokens += int(len(probs))
        oov_only.extend(probs[oovs].tolist())


def print_usage(start):
    """util::PrintUsage's line: the process's memory and times."""
    status = {}
    try:
        with open("/proc/self/status") as f:
            for row in f:
                key, _, value = row.partition(":")
                status[key] = value.strip()
    except OSError:
        pass
    usage = resource.getrusage(resource.RUSAGE_SELF)
    fields = ["Name:query"] + [f"{k}:{status[k]}" for k in ("VmPeak", "VmRSS") if k in status]
    fields += [f"RSSMax:{usage.ru_maxrss} kB", f"user:{usage.ru_utime:g}", f"sys:{usage.ru_stime:g}",
               f"CPU:{usage.ru_utime + usage.ru_stime:g}", f"real:{time.perf_counter() - start:g}"]
    print("\t".join(fields), file=sys.stderr)


@program("query")
def main(argv=None):
    start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    levels, context, flush, load, path = parse(argv)
    announce(path)
    model = Model(path, quiet_config(load))
    printer = Printer(model, levels, context, flush)
    stats = score(model, printer, sys.stdin.buffer, context)
    if printer.summary:
        sys.stdout.buffer.write(stats.summary().encode())
    sys.stdout.flush()
    print_usage(start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
