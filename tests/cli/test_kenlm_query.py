"""The query program against KenLM's own query, byte for byte on stdout: every -v
level with and without -n, on an ARPA file, KenLM's probing, trie and quantised trie
files and an nplm binary, over text with KenLM's edge cases (an empty line, a last line
without a newline, Latin-1 bytes, vertical tabs and other bytes that are or are not
white space to KenLM).  KenLM binaries take the kernel loop of _query_text, which
starts without numpy and shares large inputs among threads; its threads, its refusal
of damaged files and a file truncated under it are tested here too."""
import gzip
import random
import shutil
import struct
import subprocess
import sys

import pytest

from nplm.cli.main import main as nplm_main

from helpers import ROOT, installed_program, kenlm_program

TEXT = (b"the cat sat on the mat\n\nzzz qqq the\n caf\xe9  na\xefve\tthe\x0bcat \x1cz\r\n"
        b"the dog\x85 sat \xff\xfe on the log\nno newline at the end")
FLAGS = [[], ["-v", "sentence"], ["-v", "word"], ["-v", "summary", "-v", "word"], ["-n", "-v", "2"], ["-n"],
         ["-v", "0"], ["-b", "-v", "1"], ["-v", "word", "-n"], ["-l", "lazy"], ["-l", "read", "-v", "2"]]
KINDS = {"arpa": None, "probing": ["probing"], "trie": ["trie"], "trie-q8b8": ["-q", "8", "-b", "8", "trie"],
         "trie-q8b8-a": ["-q", "8", "-b", "8", "-a", "22", "trie"]}


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
    return subprocess.run([installed_program("query"), *args], input=text, capture_output=True, cwd=ROOT)


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


@pytest.mark.parametrize("args", [[], ["-v"], ["-v", "bogus", "m"], ["-x", "m"], ["a", "b"], ["--help"],
                                  ["--foo", "m"], ["m", "-bnl"], ["-:", "m"], ["m", "--", "-b"], ["-bvx", "m"]])
def test_usage_errors_exit_as_kenlms(args):
    a, b = ours(args), theirs(args)
    assert a.returncode == b.returncode
    assert a.stdout == b.stdout == b""
    # glibc's getopt names the program as it was called: KenLM's path, our "query"
    assert a.stderr == b.stderr.replace(kenlm_program("query").encode(), b"query")


def _arpa_variants(folder):
    """ARPA files KenLM's query reads besides a plain one: gzip-compressed, and with a
    unigram listed twice (KenLM uses the first)."""
    arpa = (ROOT / "examples" / "toy.arpa").read_bytes()
    (folder / "toy.arpa.gz").write_bytes(gzip.compress(arpa))
    lines = arpa.split(b"\n")
    at = next(i for i, line in enumerate(lines) if line.split(b"\t")[1:2] == [b"</s>"])
    lines.insert(at + 1, b"-1.5\t</s>")
    first = next(i for i, line in enumerate(lines) if line.startswith(b"ngram 1="))
    lines[first] = b"ngram 1=%d" % (int(lines[first][8:]) + 1)
    (folder / "repeated.arpa").write_bytes(b"\n".join(lines))
    return ["toy.arpa.gz", "repeated.arpa"]


def test_arpa_files_of_every_kind_are_scored_as_kenlm_scores_them(tmp_path):
    for name in _arpa_variants(tmp_path):
        for flags in ([], ["-n", "-v", "word"]):
            a, b = ours([*flags, str(tmp_path / name)]), theirs([*flags, str(tmp_path / name)])
            assert (a.returncode, a.stdout) == (b.returncode, b.stdout) and a.returncode == 0, name
        # the library's warning as one plain line, not Python's file:line form
        assert (b"listed again" in a.stderr) == (name == "repeated.arpa") and b"Warning:" not in a.stderr


def test_a_missing_model_is_one_line_and_exit_1(tmp_path):
    a = ours([str(tmp_path / "absent.arpa")])
    assert a.returncode == theirs([str(tmp_path / "absent.arpa")]).returncode == 1
    assert a.stdout == b"" and b"Traceback" not in a.stderr and b"absent.arpa" in a.stderr


def test_a_kenlm_binary_is_queried_without_numpy_or_the_kernels(models):
    # The installed script's code, which ends the process by os._exit: the modules
    # are listed there.  -S: site's .pth hooks (an editable install's finder) import
    # collections themselves.
    script = installed_program("query")
    code = ("import os, sys\nscript = sys.argv.pop(1)\nsys.argv[0] = script\nend = os._exit\n"
            "def listed(code):\n    print('modules:', *sorted(sys.modules), file=sys.stderr, flush=True)\n"
            "    end(code)\nos._exit = listed\n"
            "exec(compile(open(script).read(), script, 'exec'), {'__name__': '__main__'})\n")
    r = subprocess.run([sys.executable, "-S", "-c", code, script, models["probing"]], input=TEXT,
                       capture_output=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout == theirs([models["probing"]]).stdout
    imported = {m for line in r.stderr.decode().splitlines() if line.startswith("modules:") for m in line.split()}
    assert "nplm.backoff.kenlm._query_text" in imported
    # nor the ARPA kernels (their memoryviews import collections), nor collections
    assert not {m for m in imported if m.split(".")[0] in ("numpy", "collections")
                or m in ("nplm._kernels", "nplm.model", "nplm.backoff._arpa")}


def _text(lines, seed=0):
    """Lines of the toy model's words, unknown words and stray white space."""
    rng = random.Random(seed)
    words = ["the", "cat", "sat", "on", "mat", "dog", "zzz", "caf\xe9", "</s>", "<s>", "<unk>"]
    return b"".join((" ".join(rng.choice(words) for _ in range(rng.randrange(0, 12))) + rng.choice(["", " ", "\t"])
                     ).encode("latin-1") + b"\n" for _ in range(lines))


@pytest.mark.parametrize("flags", [[], ["-n", "-v", "2"]], ids=["default", "-n"])
def test_a_large_input_shared_among_threads_prints_what_one_thread_does(models, flags, tmp_path):
    from nplm.backoff.kenlm import reader
    from nplm.backoff.kenlm._query_text import TextQuery

    text = tmp_path / "text"
    text.write_bytes(_text(60000) + b"no newline")
    header, layout, _ = reader.read_layout(models["trie"])
    mem = reader.map_file(models["trie"], layout.end, reader.LAZY)
    query = TextQuery(mem, reader.tables(mem, header, layout, models["trie"]), models["trie"])
    outputs = []
    for threads in (1, 3):
        out = tmp_path / f"out{threads}"
        with open(text, "rb") as f, open(out, "wb") as g:
            totals = query.run(f.fileno(), g.fileno(), True, True, "-n" not in flags, False, threads)
        outputs.append((out.read_bytes(), totals))
    assert outputs[0] == outputs[1]
    kenlm = theirs(flags + [models["trie"]], text.read_bytes()).stdout
    assert outputs[0][0] == kenlm.split(b"Perplexity including")[0]


def _damage_first_unigram(path):
    from nplm.backoff.kenlm import reader

    _, layout, _ = reader.read_layout(path)
    with open(path, "r+b") as f:
        f.seek(layout.unigram.offset)
        f.write(struct.pack("<f", float("nan")))


@pytest.mark.parametrize("kind", ["probing", "trie"])
def test_a_damaged_unigram_is_refused_as_a_model_load_refuses_it(models, kind, tmp_path):
    import nplm

    path = str(tmp_path / kind)
    shutil.copy(models[kind], path)
    _damage_first_unigram(path)
    a = ours([path])
    assert a.returncode == 1 and a.stdout == b"" and b"Traceback" not in a.stderr
    config = nplm.Config()
    config.load_method = nplm.LoadMethod.LAZY
    with pytest.raises(nplm.FormatError) as e:
        nplm.Model(path, config)
    said = a.stderr.decode().splitlines()[-1]
    assert said in str(e.value) and "a probability no model holds in its unigrams (record" in said


def test_a_file_truncated_under_the_query_is_an_error_not_sigbus(models, tmp_path):
    path = tmp_path / "model"
    shutil.copy(models["probing"], path)
    code = f"""
import os, sys
from nplm.backoff.kenlm import reader
from nplm.backoff.kenlm._query_text import TextQuery
from nplm.errors import MappedFileChanged
path = {str(path)!r}
header, layout, _ = reader.read_layout(path)
mem = reader.map_file(path, layout.end, reader.LAZY)
query = TextQuery(mem, reader.tables(mem, header, layout, path), path)
os.truncate(path, 0)
r, w = os.pipe()
os.write(w, b"the cat sat on the mat\\n" * 100)
os.close(w)
try:
    query.run(r, os.open(os.devnull, os.O_WRONLY), True, True, True, False)
except MappedFileChanged as e:
    print("refused:", e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(b"refused:") and str(path).encode() in r.stdout
