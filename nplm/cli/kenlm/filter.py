"""filter: KenLM's filter program (lm/filter/filter_main.cc) — keep the n-grams of an
ARPA file (or of raw n-gram lines) whose words a vocabulary allows, byte for byte as
KenLM writes them: every kept line copied as it was, and in ARPA output a header of the
new counts written over the room the input's header took (the rest of that room stays
newlines).  Modes copy, single, multiple (one output per vocabulary line, named by
appending the line's number) and union; ``context`` checks all but the last word;
``phrase`` (union, multiple) tests the n-grams against each vocabulary line's
tab-separated phrases.

The pass is C without the GIL (nplm.backoff.arpa_filter, nplm/src/kenlm_filter*.h): the
model mapped (or read whole from a pipe), the vocabulary's hash set (or its phrases'
table of substrings) built from its bytes, the kept lines written through buffers to the outputs' file descriptors, a
regular output through a temporary file renamed over it at the end.  ``threads:m``
(default: the cores) lets a second thread filter chunks of the model with one
output; ``batch_size:`` is accepted and checked as KenLM checks it."""

import os
import signal
import sys

from nplm.backoff import arpa_filter
from nplm.cli.kenlm._program import fail, in_place, program
from nplm.io.places import TMP_PREFIX

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


def parse(argv):
    """(mode, context, phrase, raw, threads, input spec, output) as filter_main.cc reads them
    (threads: as many as there are cores unless threads:m says)."""
    if len(argv) < 3:
        raise fail(USAGE)
    mode, context, phrase, raw, threads = None, False, False, False, os.cpu_count() or 1
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
            if word.startswith("threads:"):
                threads = int(value)
        else:
            raise fail(USAGE)
    if mode is None:
        raise fail(USAGE)
    if phrase and mode not in ("union", "multiple"):
        raise fail("Phrase constraint currently only works in multiple or union mode.  If you really need it "
                   "for single, put everything on one line and use union.")
    return mode, context, phrase, raw, threads, argv[-2], argv[-1]


ERRORS = {    # the kernel's error codes (nplm/src/kenlm_filter.h) as KenLM's messages word them
    3: "Unexpected end of file",
    4: 'first non-empty line was "{line}" not \\data\\.',
    5: 'count line "{line}"doesn\'t begin with "ngram "',
    6: "ngram count lengths should be consecutive starting with 1: {line}",
    7: "Expected = immediately following the first number in the count line {line}",
    8: "Bad count in {line}",
    9: "Was expecting n-gram header \\{order}-grams: but got {line} instead",
    10: "no tab in line {line}",
    11: "Expected \\end\\ but the ARPA file has {line}",
    12: "Trailing line {line}",
    13: "too many orders in {line}",
}


class Outputs:
    """The output files, opened as file descriptors: a path that must be written in
    place (a device, a pipe, a link such as /dev/stdout) opened as KenLM opens it,
    any other through a temporary file in its folder, renamed over it by ``commit``
    and removed by ``discard``.  ``memory`` says which cannot seek (an ARPA output is
    then held until its header is known)."""

    def __init__(self, names):
        self.names, self.fds, self.tmps, self.memory = names, [], [], []
        try:
            for name in names:
                tmp = None
                if name == "-" or in_place(name):
                    fd = os.open("/dev/stdout" if name == "-" else name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
                else:
                    folder = os.path.dirname(os.path.abspath(name))
                    tmp = os.path.join(folder, f"{TMP_PREFIX}{os.urandom(6).hex()}-{os.path.basename(name)}")
                    try:
                        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                    except OSError as e:
                        raise type(e)(e.errno, e.strerror, name) from None
                self.fds.append(fd)
                self.tmps.append(tmp)
                try:
                    os.lseek(fd, 0, os.SEEK_CUR)
                    self.memory.append(False)
                except OSError:
                    self.memory.append(True)
        except BaseException:
            self.discard()
            raise

    def _close(self):
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)

    def commit(self):
        self._close()
        for tmp, name in zip(self.tmps, self.names):
            if tmp is not None:
                os.replace(tmp, name)

    def discard(self):
        try:
            self._close()
        except OSError:
            pass
        for tmp in self.tmps:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


def _read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


@program("filter")
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    mode, context, phrase, raw, threads, given, out = parse(argv)
    model_file = not given.startswith("vocab:")
    if given.startswith(("vocab:", "model:")):
        given = given[6:]
    elif ":" in given:
        raise fail(f"Specify vocab: or model: before the input file name, not {given}")
    else:
        print(f"Assuming that {given} is a model file", file=sys.stderr)
    named = os.open(given, os.O_RDONLY) if given else None
    try:
        if model_file:
            print(f"Reading {given}\n----5---10---15---20---25---30---35---40---45---50---55---60---65---70---75"
                  "---80---85---90---95--100\n" + "*" * 100, file=sys.stderr)
            vocab_fd, model_fd, source = 0, named, given
        else:
            vocab_fd, model_fd, source = named, 0, "the model on stdin"
        text = _read_all(vocab_fd) if mode != "copy" else None
        vocab = arpa_filter.Vocabulary(text) if text is not None and not phrase else None
        phrases = _phrases(text, "the vocabulary on stdin" if model_file else given) if phrase else None
        model = arpa_filter.Input(model_fd)
    except OSError as e:
        if e.filename is None and given:
            raise type(e)(e.errno, e.strerror, given) from None
        raise
    finally:
        if named is not None:
            os.close(named)
    sentences = phrases.sentences if phrase else vocab.sentences if vocab is not None else 1
    names = [f"{out}{i}" for i in range(sentences)] if mode == "multiple" else [out]
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)     # so that the temporary files go
    outputs = Outputs(names)
    try:
        error = arpa_filter.run(model, vocab, mode, context, not raw, outputs.fds, outputs.memory, threads,
                                phrases=phrases)
        if error is not None:
            _raise(error, source, names)
        outputs.commit()
    except BaseException:
        outputs.discard()
        raise
    return 0


def _phrases(text, name):
    """The phrase constraint's table of the vocabulary's bytes; out of memory, an error
    naming the vocabulary."""
    try:
        return arpa_filter.Phrases(text)
    except MemoryError as e:
        raise MemoryError(f"{name}: {e}") from None


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def _raise(error, source, names):
    """The kernel's error as an exception naming the file and line."""
    code, line_no, line, out, err, order = error
    if code == 1:
        raise OSError(err, os.strerror(err), names[out])
    if code == 2:
        raise MemoryError()
    message = ERRORS.get(code, "bad ARPA file").format(line=line.decode("utf-8", "replace"), order=order)
    raise fail(f"{source} line {line_no}: {message}")


if __name__ == "__main__":
    sys.exit(main())
