"""The query program against KenLM's own query, byte for byte on stdout: every -v
level with and without -n, on an ARPA file, KenLM's probing, trie and quantised trie
files and an nplm binary, over text with KenLM's edge cases (an empty line, a last line
without a newline, Latin-1 bytes, vertical tabs and other bytes that are or are not
white space to KenLM)."""
import subprocess
import sys

import pytest

from nplm.cli.main import main as nplm_main

from helpers import ROOT, kenlm_program

TEXT = (b"the cat sat on the mat\n\nzzz qqq the\n caf\xe9  na\xefve\tthe\x0bcat \x1cz\r\n"
        b"the dog\x85 sat \xff\xfe on the log\nno newline at the end")
FLAGS = [[], ["-v", "sentence"], ["-v", "word"], ["-v", "summary", "-v", "word"], ["-n", "-v", "2"], ["-n"],
         ["-v", "0"], ["-b", "-v", "1"], ["-v", "word", "-n"], ["-l", "lazy"], ["-l", "read", "-v", "2"]]
KINDS = {"arpa": None, "probing": ["probing"], "trie": ["trie"], "trie-q8b8": ["-q", "8", "-b", "8", "trie"]}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("query")
    out = {"arpa": str(ROOT / "examples" / "toy.arpa")}
    for kind, flags in KINDS.items():
        if flags:
            out[kind] = str(d / kind)
            subprocess.run([kenlm_program("build_binary"), *flags, out["arpa"], out[kind]], check=True,
                           capture_output=True)
    out["nplm"] = str(d / "toy.nplm")
    assert nplm_main(["build-binary", "nplm", out["arpa"], out["nplm"], "--quiet"]) == 0
    return out


def ours(args, text=TEXT):
    return subprocess.run([sys.executable, "-m", "nplm.cli.kenlm.query", *args], input=text, capture_output=True,
                          cwd=ROOT)


def theirs(args, text=TEXT):
    return subprocess.run([kenlm_program("query"), *args], input=text, capture_output=True)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("flags", FLAGS, ids=[" ".join(f) or "default" for f in FLAGS])
def test_stdout_is_kenlms(models, kind, flags):
    a, b = ours(flags + [models[kind]]), theirs(flags + [models[kind]])
    assert (a.returncode, a.stdout) == (b.returncode, b.stdout)
    # stderr: KenLM's lines before the text, and its usage line after
    assert a.stderr.splitlines()[:-1] == b.stderr.splitlines()[:-1]
    assert a.stderr.splitlines()[-1].startswith(b"Name:query\tVmPeak:")


def test_an_nplm_binary_answers_as_its_arpa(models):
    assert ours([models["nplm"]]).stdout == theirs([models["arpa"]]).stdout


@pytest.mark.parametrize("text", [b"", b"\n", b"one", b"\n\n\n", b"the cat\n" * 20000])
def test_inputs_at_the_edges(models, text):
    a, b = ours([models["probing"]], text), theirs([models["probing"]], text)
    assert (a.returncode, a.stdout) == (b.returncode, b.stdout)


@pytest.mark.parametrize("args", [[], ["-v"], ["-v", "bogus", "m"], ["-x", "m"], ["a", "b"], ["--help"]])
def test_usage_errors_exit_as_kenlms(args):
    a, b = ours(args), theirs(args)
    assert a.returncode == b.returncode
    assert a.stdout == b.stdout == b""
    assert b"Usage: query [-b] [-n] [-w] [-s] lm_file" in a.stderr


def test_a_missing_model_is_one_line_and_exit_1(tmp_path):
    a = ours([str(tmp_path / "absent.arpa")])
    assert a.returncode == theirs([str(tmp_path / "absent.arpa")]).returncode == 1
    assert a.stdout == b"" and b"Traceback" not in a.stderr and b"absent.arpa" in a.stderr
