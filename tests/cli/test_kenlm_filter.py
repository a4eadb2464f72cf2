"""The filter program against KenLM's own filter, byte for byte: every mode (copy,
single, multiple, union, phrase) with and without context, the vocabulary from a file or the
model from a file with the other on stdin, ARPA and raw outputs, and its usage errors."""
import os
import subprocess

import pytest

from helpers import REFERENCE, ROOT, installed_program, kenlm_program, need_shared

ARPA = ROOT / "examples" / "toy.arpa"
VOCABS = {"one-line": "the cat sat mat\n", "lines": "the cat sat\nmat the dog\n\n  log on  \n\nthe\n",
          "repeated words": "the cat sat the\n" * 4 + "mat the dog the on\n"}
RAW = b"the cat\t3\ncat sat\t1\nzzz the\t2\nthe\t5\n<s> the\t4\ndog on the log\t1\n"


def run(program, args, stdin, cwd):
    return subprocess.run(program + args, input=stdin, capture_output=True, cwd=cwd)


def both(tmp_path, args, stdin, outputs):
    """(our outputs, KenLM's outputs): exit code and the bytes of every output file."""
    results = []
    for name, program in (("ours", [installed_program("filter")]), ("theirs", [kenlm_program("filter")])):
        d = tmp_path / name
        d.mkdir()
        r = run(program, args, stdin, d)
        results.append((r.returncode, [(d / o).read_bytes() if (d / o).exists() else None for o in outputs]))
    return results


@pytest.mark.parametrize("vocab", list(VOCABS))
@pytest.mark.parametrize("mode", ["copy", "single", "union", "single context", "union context"])
@pytest.mark.parametrize("given", ["vocab", "model"])
def test_arpa_output_is_kenlms(tmp_path, mode, vocab, given):
    (tmp_path / "v.txt").write_text(VOCABS[vocab])
    if given == "vocab":
        args, stdin = mode.split() + [f"vocab:{tmp_path / 'v.txt'}", "out.arpa"], ARPA.read_bytes()
    else:
        args, stdin = mode.split() + [f"model:{ARPA}", "out.arpa"], VOCABS[vocab].encode()
    ours, theirs = both(tmp_path, args, stdin, ["out.arpa"])
    assert ours == theirs and ours[1][0]


@pytest.mark.parametrize("flags", [[], ["context"], ["raw", "threads:1"]])
def test_multiple_writes_one_file_per_line(tmp_path, flags):
    (tmp_path / "v.txt").write_text(VOCABS["lines"])
    stdin = RAW if "raw" in flags else ARPA.read_bytes()
    ours, theirs = both(tmp_path, ["multiple", *flags, f"vocab:{tmp_path / 'v.txt'}", "out"], stdin,
                        [f"out{i}" for i in range(5)])
    assert ours == theirs
    assert ours[1][4] is None and all(f is not None for f in ours[1][:4])     # four lines of words


@pytest.mark.parametrize("mode", ["single", "union", "single context", "copy"])
def test_raw_output_is_kenlms_unthreaded(tmp_path, mode):
    """KenLM's threaded raw output writes nothing (its threads' buffers are never
    flushed to the file); nplm writes what its one-thread run writes."""
    (tmp_path / "v.txt").write_text(VOCABS["lines"])
    args = mode.split() + ["raw", f"vocab:{tmp_path / 'v.txt'}", "out.txt"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ours, _ = both(tmp_path / "a", args, RAW, ["out.txt"])
    _, theirs = both(tmp_path / "b", args[:-2] + ["threads:1"] + args[-2:], RAW, ["out.txt"])
    assert ours == theirs and ours[1][0]


@pytest.mark.parametrize("args", [[], ["single"], ["bogus", "vocab:v", "o"], ["single", "foo:v", "o"],
                                  ["single", "phrase", "vocab:v", "o"], ["single", "threads:0", "vocab:v", "o"]])
def test_usage_errors_exit_as_kenlms(tmp_path, args):
    ours = run([installed_program("filter")], args, b"", tmp_path)
    theirs = run([kenlm_program("filter")], args, b"", tmp_path)
    assert ours.returncode == theirs.returncode == 1
    assert ours.stderr.splitlines()[:1] == [line.replace(kenlm_program("filter").encode(), b"filter")
                                            for line in theirs.stderr.splitlines()[:1]]


def test_a_kn5_model_filtered_to_a_vocabulary(tmp_path):
    """A real model: lmplz's PTB 5-gram reference, filtered to a test text's words."""
    import lzma
    need_shared()
    arpa = tmp_path / "kn5.arpa"
    arpa.write_bytes(lzma.open(REFERENCE / "ptb5k.o5.arpa.xz").read())
    (tmp_path / "v.txt").write_text("the of and to a in is that for it as was with be by on not he\n")
    ours, theirs = both(tmp_path, ["single", f"vocab:{tmp_path / 'v.txt'}", "out.arpa"], arpa.read_bytes(),
                        ["out.arpa"])
    assert ours == theirs


def _layouts():
    """toy.arpa laid out as KenLM's reader also accepts it."""
    text = ARPA.read_bytes()
    body = text[:text.rindex(b"\\end\\")]
    return {
        "crlf": text.replace(b"\n", b"\r\n"),
        "comments and blank lines first": b"\n# a comment\n  \n" + text,
        "blank and tab lines between sections": text.replace(b"\n\n\\", b"\n \n\t\n\n\\"),
        "no newline at the end": text.rstrip(b"\n"),
        "blank lines after the end": text + b"\n\t\n\n",
        "spaces between words": body.replace(b"the cat", b"the  cat") + b"\\end\\\n",
    }


LAYOUTS = _layouts()


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("mode", ["single", "union context", "copy"])
def test_layouts_are_kenlms(tmp_path, layout, mode):
    (tmp_path / "v.txt").write_text(VOCABS["lines"])
    ours, theirs = both(tmp_path, mode.split() + [f"vocab:{tmp_path / 'v.txt'}", "out.arpa"], LAYOUTS[layout],
                        ["out.arpa"])
    assert ours == theirs and ours[0] == 0


def _broken():
    text = ARPA.read_bytes()
    return {
        "count too high": text.replace(b"ngram 3=197", b"ngram 3=198"),
        "count too low": text.replace(b"ngram 2=151", b"ngram 2=150"),
        "a line without a tab": text.replace(b"\tthe cat\t", b" the cat ", 1),
        "a blank line in a section": text.replace(b"\n\\3-grams:", b"\\3-grams:").replace(b"ngram 2=151",
                                                                                          b"ngram 2=152"),
        "no end": text[:text.rindex(b"\\end\\")],
        "a line after the end": text + b"more\n",
        "no data": text[7:],
        "orders not consecutive": text.replace(b"ngram 2=", b"ngram 4="),
    }


@pytest.mark.parametrize("case", list(_broken()))
def test_broken_arpa_fails_as_kenlms(tmp_path, case):
    """Both refuse; nplm names the line and leaves no output file (KenLM leaves what
    it wrote before the error)."""
    (tmp_path / "v.txt").write_text(VOCABS["lines"])
    args = ["single", f"vocab:{tmp_path / 'v.txt'}", "out.arpa"]
    (tmp_path / "ours").mkdir()
    ours = run([installed_program("filter")], args, _broken()[case], tmp_path / "ours")
    theirs = run([kenlm_program("filter")], args, _broken()[case], tmp_path)
    assert ours.returncode == theirs.returncode == 1
    assert b" line " in ours.stderr and not (tmp_path / "ours" / "out.arpa").exists()


def _kernel_outputs(tmp_path, data, mode, arpa, runs, phrases=None):
    """The kernel's output of ``data`` for each keyword set of ``runs`` (the vocabulary
    of VOCABS["lines"], or the phrase constraint of ``phrases``)."""
    from nplm.backoff import _filter

    (tmp_path / "m").write_bytes(data)
    fd = os.open(tmp_path / "m", os.O_RDONLY)
    model = _filter.Input(fd)
    os.close(fd)
    vocab = _filter.Vocabulary(VOCABS["lines"].encode()) if phrases is None else None
    table = _filter.Phrases(phrases) if phrases is not None else None
    for kw in runs:
        fd = os.open(tmp_path / "k", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            assert _filter.run(model, vocab, mode.split()[0], "context" in mode, arpa, [fd], [False], threads=2,
                               split_min=0, phrases=table, **kw) is None
        finally:
            os.close(fd)
        yield kw, (tmp_path / "k").read_bytes()


@pytest.mark.parametrize("layout", ["plain", "crlf", "blank and tab lines between sections", "no newline at the end"])
@pytest.mark.parametrize("mode", ["single", "union", "single context", "copy"])
def test_second_thread_is_kenlms_wherever_the_chunks_fall(tmp_path, layout, mode):
    """The kernel's second thread with chunks of every size from one line to many,
    done before the first thread starts (so that the first takes every run it can)
    or alongside it: the output is KenLM's whether the first thread takes the
    second's runs or reads on by itself."""
    data = ARPA.read_bytes() if layout == "plain" else LAYOUTS[layout]
    (tmp_path / "v.txt").write_text(VOCABS["lines"])
    _, theirs = both(tmp_path, mode.split() + [f"vocab:{tmp_path / 'v.txt'}", "out.arpa"], data, ["out.arpa"])
    runs = [{"chunk": c, "wait_second": True} for c in range(1, 400, 3)] + [{"chunk": c} for c in (1, 50, 1000)]
    for kw, got in _kernel_outputs(tmp_path, data, mode, True, runs):
        assert got == theirs[1][0], kw


def test_raw_second_thread_is_kenlms(tmp_path):
    data = RAW * 50
    (tmp_path / "v.txt").write_text(VOCABS["lines"])
    _, theirs = both(tmp_path, ["single", "raw", "threads:1", f"vocab:{tmp_path / 'v.txt'}", "out.txt"], data,
                     ["out.txt"])
    runs = [{"chunk": c, "wait_second": True} for c in range(1, 200, 7)] + [{"chunk": 10}]
    for kw, got in _kernel_outputs(tmp_path, data, "single", False, runs):
        assert got == theirs[1][0], kw


# phrase: tabs and \v end phrases, \r and other white space end a sentence
PHRASES = b"the cat sat\ton the mat\n\n  a dog\x0bplayed in\tthe log\r the cat\n<s> the\tsat on\nmat\n"


@pytest.mark.parametrize("mode", ["union phrase", "multiple phrase", "union phrase context",
                                  "multiple context phrase"])
@pytest.mark.parametrize("fmt", ["arpa", "raw"])
def test_phrase_is_kenlms(tmp_path, mode, fmt):
    (tmp_path / "v.txt").write_bytes(PHRASES)
    model = ARPA.read_bytes() if fmt == "arpa" else RAW
    names = [f"out{i}" for i in range(6)] if "multiple" in mode else ["out"]
    extra = ["raw", "threads:1"] if fmt == "raw" else []
    ours, theirs = both(tmp_path, mode.split() + extra + [f"vocab:{tmp_path / 'v.txt'}", "out"], model, names)
    assert ours == theirs and ours[0] == 0 and ours[1][0]


# phrase files as a translation system's phrase tables give them: repeated words within
# a phrase, empty phrases (tabs in a row, lines of tabs and spaces), a word in many
# phrases and sentences, sentence tags inside phrases
PHRASE_FILES = {
    "white space": PHRASES,
    "repeated words": b"the the cat\tcat sat the\tthe\nthe dog the dog\tdog\n",
    "empty phrases": b"\t\tthe cat\t\t\tsat\t\n\t\n \t \x0b\nmat on\t\n\t\t",
    "shared words": b"the cat\tcat sat\tsat on\ton the\tthe mat\nthe dog\tdog barked\tthe\na\tthe\tcat\n",
    "tags": b"<s> the cat\tsat </s>\n<s>\t</s> the\tdog </s>\n",
    "no phrases": b" \t\n\n",
}
PHRASE_MODES = ["union phrase", "multiple phrase", "union phrase context", "multiple context phrase"]
# every n-gram of up to four words over these, a line each: each n-gram of each order
# spans phrase boundaries, holds tags, and words of no phrase
PHRASE_WORDS = ["<s>", "</s>", "the", "cat", "sat", "zzz"]


def _all_ngrams():
    grams = [[w] for w in PHRASE_WORDS]
    lines, last = [], grams
    for _ in range(4):
        lines += [" ".join(g) + "\t1\n" for g in last]
        last = [g + [w] for g in last for w in PHRASE_WORDS]
    return "".join(lines).encode()


def _phrase_run(tmp_path, mode, phrases, model, raw):
    """Both programs' outputs (every output file of multiple mode, which writes one per
    sentence with a phrase: at most one per line of the phrase file)."""
    (tmp_path / "v.txt").write_bytes(phrases)
    names = [f"out{i}" for i in range(phrases.count(b"\n") + 3)] if "multiple" in mode else ["out"]
    extra = ["raw", "threads:1"] if raw else []
    return both(tmp_path, mode.split() + extra + [f"vocab:{tmp_path / 'v.txt'}", "out"], model, names)


@pytest.mark.parametrize("case", list(PHRASE_FILES))
@pytest.mark.parametrize("mode", PHRASE_MODES)
def test_phrase_files_are_kenlms_on_every_ngram(tmp_path, case, mode):
    """Every n-gram of up to four words over a few words (raw lines), against each
    phrase file."""
    ours, theirs = _phrase_run(tmp_path, mode, PHRASE_FILES[case], _all_ngrams(), raw=True)
    assert ours == theirs and ours[0] == 0


@pytest.mark.parametrize("case", list(PHRASE_FILES))
@pytest.mark.parametrize("mode", PHRASE_MODES)
def test_phrase_files_are_kenlms_on_a_model(tmp_path, case, mode):
    ours, theirs = _phrase_run(tmp_path, mode, PHRASE_FILES[case], ARPA.read_bytes(), raw=False)
    assert ours == theirs and ours[0] == 0


def test_phrase_keeps_and_drops_ngrams_of_every_order(tmp_path):
    """The union of "shared words" keeps some n-grams of each of toy.arpa's orders
    and drops others, as KenLM does."""
    ours, theirs = _phrase_run(tmp_path, "union phrase", PHRASE_FILES["shared words"], ARPA.read_bytes(), raw=False)
    assert ours == theirs
    kept = [int(line.split(b"=")[1]) for line in ours[1][0].splitlines() if line.startswith(b"ngram ")]
    given = [int(line.split(b"=")[1]) for line in ARPA.read_bytes().splitlines() if line.startswith(b"ngram ")]
    assert len(kept) == len(given) == 3 and all(0 < k < g for k, g in zip(kept, given))


@pytest.mark.parametrize("mode", ["union phrase", "multiple phrase"])
def test_phrase_on_a_kn5_model_is_kenlms(tmp_path, mode):
    """A real model (lmplz's PTB 5-gram reference) against phrases of one to three
    words of ten of its text's sentences, a line of them per sentence."""
    import lzma
    need_shared()
    sentences = (REFERENCE / "ptb5k.txt").read_text().splitlines()[100:110]
    phrases = "".join("\t".join(" ".join(w[i:i + n]) for n in (1, 2, 3) for i in range(len(w) - n + 1)) + "\n"
                      for w in (line.split() for line in sentences))
    model = lzma.open(REFERENCE / "ptb5k.o5.arpa.xz").read()
    ours, theirs = _phrase_run(tmp_path, mode, phrases.encode(), model, raw=False)
    assert ours == theirs and all(o is not None for o in ours[1][:10])


@pytest.mark.parametrize("mode", ["union", "union context"])
def test_phrase_second_thread_is_kenlms(tmp_path, mode):
    """The phrase constraint in the kernel's second thread, chunks of every size."""
    phrases = PHRASE_FILES["shared words"]
    _, theirs = _phrase_run(tmp_path, mode.replace("union", "union phrase"), phrases, ARPA.read_bytes(), raw=False)
    runs = [{"chunk": c, "wait_second": True} for c in range(1, 400, 7)] + [{"chunk": c} for c in (1, 50, 1000)]
    for kw, got in _kernel_outputs(tmp_path, ARPA.read_bytes(), mode, True, runs, phrases=phrases):
        assert got == theirs[1][0], kw


def _random_phrases(seed, sentences):
    """Sentences of one to four random phrases of one to three of PHRASE_WORDS (some
    ending in tags), a line each."""
    import random
    rng = random.Random(seed)
    lines = ["\t".join(" ".join(rng.choice(PHRASE_WORDS) for _ in range(rng.randint(1, 3)))
                       for _ in range(rng.randint(1, 4))) for _ in range(sentences)]
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("mode", ["union phrase", "multiple phrase"])
@pytest.mark.parametrize("seed", [1, 2])
def test_many_sentences_of_phrases_are_kenlms(tmp_path, mode, seed):
    """More sentences than a list's bits tell apart (the table's quick test of two
    lists meeting), every n-gram of up to four words."""
    ours, theirs = _phrase_run(tmp_path, mode, _random_phrases(seed, 90), _all_ngrams(), raw=True)
    assert ours == theirs and ours[0] == 0
    if mode.startswith("multiple"):
        assert sum(o is not None for o in ours[1]) == 90


def test_a_phrase_too_long_for_memory_fails_in_a_line(tmp_path):
    """A phrase of 40,000 words has 800 million substrings: a one-line error naming
    the phrase file, and no output file."""
    (tmp_path / "v.txt").write_text(" ".join(f"w{i}" for i in range(40000)) + "\n")
    r = run([installed_program("filter")], ["union", "phrase", f"vocab:{tmp_path / 'v.txt'}", "out.arpa"],
            ARPA.read_bytes(), tmp_path)
    assert r.returncode == 1 and not (tmp_path / "out.arpa").exists()
    assert r.stderr.count(b"\n") == 1 and b"v.txt: out of memory for the phrases' table" in r.stderr


@pytest.mark.parametrize("mode", ["union phrase", "multiple phrase"])
def test_phrase_on_long_raw_lines_is_kenlms(tmp_path, mode):
    """Raw lines of 2,000 words (a graph of as many vertices), kept and dropped."""
    words = "the cat sat on the mat".split() * 400
    lines = [words[:2000], words[1:2001], words[:1999] + ["zzz"], ["mat", "the"] * 1000]
    raw = "".join(" ".join(w) + "\t1\n" for w in lines).encode()
    phrases = b"the cat\tsat on\tthe mat\nmat the\tcat sat\ton the\tthe\tcat\n\tthe cat sat on the mat\n"
    ours, theirs = _phrase_run(tmp_path, mode, phrases, raw, raw=True)
    assert ours == theirs and ours[0] == 0
    assert 0 < sum(o.count(b"\n") for o in ours[1] if o) < len(lines) * (3 if "multiple" in mode else 1)
