"""filter: KenLM's filter program (lm/filter/filter_main.cc) — keep the n-grams of an
ARPA file (or of raw n-gram lines) whose words a vocabulary allows, byte for byte as
KenLM writes them: every kept line copied as it was, and in ARPA output a header of the
new counts written over the room the input's header took (the rest of that room stays
newlines).  Modes copy, single, multiple (one output per vocabulary line, named by
appending the line's number) and union; ``context`` checks all but the last word;
``threads:`` and ``batch_size:`` are accepted (the work is one streaming pass)."""

import os
import sys
import tempfile

from nplm.cli.kenlm._program import fail, in_place, program

USAGE = (
    "Usage: filter mode [context] [phrase] [raw|arpa] [threads:m] [batch_size:m] (vocab|model):input_file output_file\n\n"
    "copy mode just copies, but makes the format nicer for e.g. irstlm's broken\n"
    "    parser.\n"
    "single mode treats the entire input as a single sentence.\n"
    "multiple mode filters to multiple sentences in parallel.  Each sentence is on\n"
    "    a separate line.  A separate file is created for each sentence by appending\n"
    "    the 0-indexed line number to the output file name.\n"
    "union mode produces one filtered model that is the union of models created by\n"
    "    multiple mode.\n\n"
    "context means only the context (all but last word) has to pass the filter, but\n"
    "    the entire n-gram is output.\n\n"
    "phrase means that the vocabulary is actually tab-delimited phrases and that the\n"
    "    phrases can generate the n-gram when assembled in arbitrary order and\n"
    "    clipped.  Currently works with multiple or union mode.\n\n"
    "The file format is set by [raw|arpa] with default arpa:\n"
    "raw means space-separated tokens, optionally followed by a tab and arbitrary\n"
    "    text.  This is useful for ngram count files.\n"
    "arpa means the ARPA file format for n-gram language models.\n\n"
    "threads:m sets m threads (default: conccurrency detected by boost)\n"
    "batch_size:m sets the batch size for threading.  Expect memory usage from this\n"
    "    of 2*threads*batch_size n-grams.\n\n"
    "There are two inputs: vocabulary and model.  Either may be given as a file\n"
    "    while the other is on stdin.  Specify the type given as a file using\n"
    "    vocab: or model: before the file name.  \n\n"
    "For ARPA format, the output must be seekable.  For raw format, it can be a\n"
    "    stream i.e. /dev/stdout")
MODES = ("copy", "single", "multiple", "union")
SPACE = b" \t\n\r\x0b\x0c"


def parse(argv):
    """(mode, context, raw, input spec, output) as filter_main.cc reads them."""
    if len(argv) < 3:
        raise fail(USAGE)
    mode, context, phrase, raw = None, False, False, False
    for word in argv[:-2]:
        if word in MODES:
            mode = word
        elif word in ("context", "phrase", "arpa", "raw"):
            context, phrase = context or word == "context", phrase or word == "phrase"
            raw = (word == "raw") if word in ("arpa", "raw") else raw
        elif word.startswith("threads:") or word.startswith("batch_size:"):
            value = word.split(":", 1)[1]
            if not value.isdigit():
                raise fail("bad lexical cast: source type value could not be interpreted as target")
            if int(value) == 0:
                raise fail("Specify at least one thread." if word.startswith("threads") else
                           "Batch size must be at least one and should probably be >= 5000")
        else:
            raise fail(USAGE)
    if mode is None:
        raise fail(USAGE)
    if phrase and mode not in ("union", "multiple"):
        raise fail("Phrase constraint currently only works in multiple or union mode.  If you really need it "
                   "for single, put everything on one line and use union.")
    if phrase:
        raise fail("filter: the phrase constraint is not supported by nplm's filter")
    return mode, context, raw, argv[-2], argv[-1]


def read_vocabulary(stream, mode):
    """single: the set of words; union/multiple: word -> the sentence numbers (lines)
    that hold it, and the number of sentences (vocab::ReadMultiple)."""
    if mode == "single":
        return set(stream.read().split()), 1
    words, sentence = {}, 0
    for line in stream:
        tokens = line.split()
        if not tokens:
            continue
        for w in tokens:
            posting = words.setdefault(w, [])
            if not posting or posting[-1] != sentence:
                posting.append(sentence)
        sentence += 1
    return words, sentence


def _is_tag(word):
    return word[:1] == b"<" and word[-1:] == b">"


def make_filter(mode, vocab, sentences, context):
    """A function of an n-gram's words: the sentences (as a list) it passes for, or
    True/False where there is one output."""
    def checked(words):
        return [w for w in (words[:-1] if context else words) if not _is_tag(w)]

    if mode == "single":
        return lambda words: all(w in vocab for w in checked(words))
    if mode == "union":
        def passes(words):
            sets = [vocab.get(w) for w in checked(words)]
            if any(s is None for s in sets):
                return False
            return not sets or bool(set(sets[0]).intersection(*sets[1:]))
        return passes

    def which(words):
        sets = [vocab.get(w) for w in checked(words)]
        if any(s is None for s in sets):
            return []
        return list(range(sentences)) if not sets else sorted(set(sets[0]).intersection(*sets[1:]))
    return which


class ArpaOut:
    """An ARPA output as KenLM's ARPAOutput writes it: room for the input's header,
    the kept lines, then the new counts written over the start of that room."""

    def __init__(self, path, reserve):
        self.path, self.counts, self.n = path, [], 0
        self.chunks = [b"\n" * reserve]

    def begin(self, order):
        self.chunks.append(b"\\%d-grams:\n" % order)
        self.n = 0

    def add(self, line):
        self.chunks.append(line)
        self.n += 1

    def end(self, order):
        self.chunks.append(b"\n")
        self.counts += [0] * (order - len(self.counts))
        self.counts[order - 1] = self.n

    def finish(self):
        self.chunks.append(b"\\end\\\n")
        header = _counts_header(self.counts)
        self.chunks[0] = header + self.chunks[0][len(header):]
        write_file(self.path, self.chunks)


def _counts_header(counts):
    return b"\n\\data\\\n" + b"".join(b"ngram %d=%d\n" % (i + 1, c) for i, c in enumerate(counts)) + b"\n"


def write_file(path, chunks):
    """Write in place where the path is a device, pipe or link to one (/dev/stdout);
    a regular file through a temporary file and a rename."""
    if path == "-" or in_place(path):
        with open(path if path != "-" else "/dev/stdout", "wb") as f:
            f.writelines(chunks)
        return
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".filter-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.writelines(chunks)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def filter_arpa(stream, outputs, choose, allowed=None):
    """An ARPA file's n-gram sections (the rest of ``stream`` after the header) into
    ``outputs`` (ArpaOut), each n-gram line to the outputs ``choose(words)`` names.
    ``allowed``, a set of words, is the fast test of single mode: a line passes when
    every word of it is in the set (the file's tags added)."""
    data = stream.read()
    end = data.rfind(b"\\end\\")
    if end < 0:
        raise fail("Reached end of file before \\end\\")
    for section in data[:end].split(b"\n\\")[0 if data.startswith(b"\\") else 1:]:
        head, _, body = section.lstrip(b"\\").partition(b"\n")
        if not (head.endswith(b"-grams:") and head[:-7].isdigit()):
            raise fail(f"Expected an n-gram section header, not {head[:60].decode(errors='replace')}")
        order = int(head[:-7])
        lines = [line for line in body.split(b"\n") if line.strip(SPACE)]
        for out in outputs:
            out.begin(order)
        if allowed is not None and all(b"\t" in line for line in lines):
            if order == 1:
                allowed |= {w for w in (line.split(b"\t")[1] for line in lines) if _is_tag(w)}
            kept = [line + b"\n" for line in lines if allowed.issuperset(line.split(b"\t")[1].split(b" "))]
            outputs[0].chunks += kept
            outputs[0].n += len(kept)
        else:
            for line in lines:
                for i in choose(_words(line, order)):
                    outputs[i].add(line + b"\n")
        for out in outputs:
            out.end(order)


def _words(line, order):
    """An ARPA line's words: the field after the first tab, or (a file laid out with
    spaces) the order's words after the probability."""
    fields = line.split(b"\t")
    return fields[1].split() if len(fields) > 1 else line.split()[1:1 + order]


def header_counts(lines):
    """The counts of an ARPA header, reading up to the blank line after them."""
    counts = []
    for raw in lines:
        line = raw.strip()
        if line.startswith(b"ngram "):
            counts.append(int(line.split(b"=", 1)[1]))
        elif counts and not line:
            return counts
    raise fail("Reached end of file before the ARPA header's counts")


@program("filter")
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    mode, context, raw, given, out = parse(argv)
    model_file = not given.startswith("vocab:")
    if given.startswith(("vocab:", "model:")):
        given = given[6:]
    elif ":" in given:
        raise fail(f"Specify vocab: or model: before the input file name, not {given}")
    else:
        print(f"Assuming that {given} is a model file", file=sys.stderr)
    with open(given, "rb") as named:
        model_in, vocab_in = (named, sys.stdin.buffer) if model_file else (sys.stdin.buffer, named)
        if model_file:
            print(f"Reading {given}\n----5---10---15---20---25---30---35---40---45---50---55---60---65---70---75"
                  "---80---85---90---95--100\n" + "*" * 100, file=sys.stderr)
        vocab, sentences = read_vocabulary(vocab_in, mode) if mode != "copy" else (None, 1)
        check = (lambda words: True) if mode == "copy" else make_filter(mode, vocab, sentences, context)
        if raw:
            return _filter_raw(model_in, out, mode, check, sentences)
        counts = header_counts(model_in)
        reserve = len(_counts_header(counts))
        names = [f"{out}{i}" for i in range(sentences)] if mode == "multiple" else [out]
        outputs = [ArpaOut(name, reserve) for name in names]
        choose = check if mode == "multiple" else (lambda words: (0,) if check(words) else ())
        fast = set(vocab) if mode == "single" and not context else None
        filter_arpa(model_in, outputs, choose, fast)
    for o in outputs:
        o.finish()
    return 0


def _filter_raw(lines, out, mode, check, sentences):
    """Raw n-gram lines ('w1 w2<TAB>anything'): the kept lines, no header."""
    names = [f"{out}{i}" for i in range(sentences)] if mode == "multiple" else [out]
    kept = [[] for _ in names]
    for raw in lines:
        words = raw.split(b"\t", 1)[0].split()
        if not words:
            continue
        line = raw if raw.endswith(b"\n") else raw + b"\n"
        chosen = check(words) if mode == "multiple" else ((0,) if check(words) else ())
        for i in chosen:
            kept[i].append(line)
    for name, chunks in zip(names, kept):
        write_file(name, chunks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
