"""The filter program against KenLM's own filter, byte for byte: every mode (copy,
single, multiple, union) with and without context, the vocabulary from a file or the
model from a file with the other on stdin, ARPA and raw outputs, and its usage errors."""
import subprocess
import sys

import pytest

from helpers import REFERENCE, ROOT, kenlm_program, need_shared

ARPA = ROOT / "examples" / "toy.arpa"
VOCABS = {"one-line": "the cat sat mat\n", "lines": "the cat sat\nmat the dog\n\n  log on  \n\nthe\n"}
RAW = b"the cat\t3\ncat sat\t1\nzzz the\t2\nthe\t5\n<s> the\t4\ndog on the log\t1\n"


def run(program, args, stdin, cwd):
    return subprocess.run(program + args, input=stdin, capture_output=True, cwd=cwd)


OURS = [sys.executable, "-m", "nplm.cli.kenlm.filter"]


def both(tmp_path, args, stdin, outputs):
    """(our outputs, KenLM's outputs): exit code and the bytes of every output file."""
    results = []
    for name, program in (("ours", OURS), ("theirs", [kenlm_program("filter")])):
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
    ours = run(OURS, args, b"", tmp_path)
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
