"""query: KenLM's query program (lm/query_main.cc, lm/ngram_query.hh) over any model
nplm loads.  Standard input is read as bytes and split into words at ASCII white
space, as KenLM's FilePiece does; the output is KenLM's byte for byte, including its
two edge cases: a last line without a newline is scored word by word but gets no </s>
and no Total line (its words count as tokens only), and ``-n`` prints a bare Total line
for an empty line.

A KenLM binary is queried by one kernel loop (nplm.backoff.kenlm.query_text) that
this module reaches without importing numpy or nplm's model kernels: KenLM's query of
a test set takes a few hundredths of a second in all, about what importing numpy
alone takes.  Every other model goes through nplm.Model (_query_model)."""

import importlib
import os
import resource
import sys
import time

from nplm.backoff.kenlm import query_text, reader
from nplm.cli.kenlm._program import GetoptError, fail, gnu_getopt, program
from nplm.query_summary import CorpusStats

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
LOAD = {"lazy": reader.LAZY, "populate": reader.POPULATE_OR_READ, "read": reader.READ,
        "parallel": reader.PARALLEL_READ}


def parse(argv):
    """(levels, sentence_context, flush, load_method, model path) from query's getopt
    options, or the usage text as a failure."""
    if not argv or argv == ["--help"]:
        raise fail(USAGE.rstrip("\n"))
    try:
        opts, rest = gnu_getopt(argv, "bnv:l:")
    except GetoptError as e:
        raise fail(f"query: {e}\n{USAGE}".rstrip("\n")) from None
    levels, context, flush, load = set(), True, False, reader.POPULATE_OR_READ
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


def score_kenlm_binary(path, load, levels, context, flush):
    """Score standard input with the KenLM binary ``path`` in one kernel loop that
    reads, scores and prints (nplm.backoff.kenlm.query_text); the CorpusStats."""
    header, layout, _ = query_text.read_layout(path)
    print(f"This binary file contains {header.model_name}.", file=sys.stderr)
    return run_text_query(query_text.open_query(path, header, layout, load), levels, context, flush)


def score_arpa(path, load, levels, context, flush):
    """Score standard input with the ARPA file ``path`` as KenLM's query does: the
    model built as KenLM's probing structure in memory, then the kernel loop."""
    return run_text_query(query_text.arpa_query(path), levels, context, flush)


def run_text_query(query, levels, context, flush):
    sys.stdout.flush()
    totals = query.run(sys.stdin.fileno(), sys.stdout.fileno(), "word" in levels, "sentence" in levels,
                       context, flush, query_text.cpu_count())
    return CorpusStats(*totals)


def score_model(path, load, levels, context, flush):
    """Score standard input with any other model nplm loads; the CorpusStats."""
    return importlib.import_module("nplm.cli.kenlm._query_model").run(path, load, levels, context, flush)


def arpa_order(path):
    """The order of the ARPA file ``path`` (plain or compressed), or 0 for any other file."""
    kind, stream = importlib.import_module("nplm.io.files").sniff(path)
    stream.close()
    if kind != "arpa":
        return 0
    return len(importlib.import_module("nplm.io.resources").arpa_header_counts(path) or ())


def print_arpa_banner(path):
    """What KenLM's query writes on stderr as it reads an ARPA file."""
    print("Loading the LM will be faster if you build a binary file.\nReading " + path + "\n"
          "----5---10---15---20---25---30---35---40---45---50---55---60---65---70---75---80---85---90---95--100\n"
          + "*" * 100, file=sys.stderr)


def scorer(path):
    """The score_* function for the model at ``path``, after KenLM's banner for an ARPA
    file: KenLM's binaries and the ARPA files KenLM's probing structure holds take the
    kernel loop (which reads and writes file descriptors), every other model
    nplm.Model."""
    real_files = _real_files()
    if real_files and reader.is_kenlm_binary(path):
        return score_kenlm_binary
    order = arpa_order(path)
    if order:
        print_arpa_banner(path)
    return score_arpa if real_files and 2 <= order <= query_text.MAX_ORDER else score_model


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


def _real_files():
    """Whether standard input and output are file descriptors (not a test's BytesIO),
    which the kernel loop reads and writes."""
    try:
        sys.stdin.fileno(), sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):     # (io.UnsupportedOperation is both)
        return False
    return True


@program("query")
def main(argv=None):
    start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    levels, context, flush, load, path = parse(argv)
    stats = scorer(path)(path, load, levels, context, flush)
    if "summary" in levels:
        sys.stdout.buffer.write(stats.summary().encode())
    sys.stdout.flush()
    print_usage(start)
    return 0


def script():
    """The installed ``query``: main, then the process ends as a C program's does,
    without tearing the interpreter down (a few milliseconds of a run that KenLM
    finishes in three hundredths of a second).  Nothing is left to do by then: the
    output is flushed, and query writes no files."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    script()
