"""The programs installed under KenLM's names (lmplz, build_binary, count_ngrams,
fragment) against KenLM's own: the command lines of real pipelines run through both,
outputs compared byte for byte, exit codes and error messages compared."""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from nplm.cli.kenlm import PROGRAMS
from nplm.cli.kenlm import _options as po
from nplm.cli.kenlm import run as run_program

from helpers import REFERENCE, ROOT, installed_program, kenlm_program

pytestmark = pytest.mark.slow

MINE = ("lmplz", "build_binary", "count_ngrams", "fragment")


def ours(name, args, stdin=None, stdout=subprocess.PIPE):
    """nplm's program ``name`` as pip installed it, run by its name."""
    return subprocess.run([installed_program(name), *args], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                          cwd=ROOT, timeout=600)


def theirs(name, args, stdin=None, stdout=subprocess.PIPE):
    return subprocess.run([kenlm_program(name), *args], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                          cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The first 1,500 lines of PTB train (<unk> as UNK, which lmplz accepts) where
    ../shared is, else 1,500 sentences of Zipf-distributed words."""
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    if (REFERENCE / "ptb5k.txt").is_file():
        with open(REFERENCE / "ptb5k.txt", "rb") as f:
            path.write_bytes(b"".join(f.readlines()[:1500]))
        return path
    rng = np.random.default_rng(7)
    p = 1.0 / np.arange(1, 3001)
    words = rng.choice(3000, size=30000, p=p / p.sum())
    cuts = np.cumsum(rng.integers(3, 30, size=1500))
    path.write_text("".join(" ".join(f"w{w}" for w in s) + "\n" for s in np.split(words, cuts[cuts < 30000])))
    return path


# (pipeline, steps): each step is (program, arguments, stdin file, stdout file); {d} is
# the folder of one side's files, {text} the corpus
PIPELINES = [
    ("espnet", [("lmplz", ["-S", "20%", "--discount_fallback", "-o", "3", "-"], "{text}", "{d}/lm.arpa"),
                ("build_binary", ["-s", "{d}/lm.arpa", "{d}/lm.bin"], None, None)]),
    ("nemo", [("lmplz", ["-o", "4", "--arpa", "{d}/lm.arpa", "", "--prune", "0", "1"], "{text}", None),
              ("build_binary", ["trie", "{d}/lm.arpa", "{d}/lm.bin"], None, None)]),
    ("cc_net", [("lmplz", ["-o", "5", "-S", "8G", "-T", "{d}", "--vocab_estimate", "20000",
                           "--discount_fallback"], "{text}", "{d}/lm.arpa"),
                ("build_binary", ["{d}/lm.arpa", "{d}/lm.bin"], None, None)]),
    ("deepspeech", [("lmplz", ["--order", "3", "--temp_prefix", "{d}", "--memory", "10%", "--text", "{text}",
                               "--arpa", "{d}/lm.arpa", "--prune", "0", "0", "1"], None, None),
                    ("build_binary", ["-a", "255", "-q", "8", "-v", "trie", "{d}/lm.arpa", "{d}/lm.bin"],
                     None, None)]),
]


def run_pipeline(run, steps, folder, text):
    codes = []
    for program, args, stdin, stdout in steps:
        args = [a.format(d=folder, text=text) for a in args]
        with open(stdin.format(d=folder, text=text) if stdin else os.devnull, "rb") as f, \
                open(stdout.format(d=folder, text=text) if stdout else os.devnull, "wb") as out:
            codes.append(run(program, args, stdin=f, stdout=out).returncode)
    return codes


@pytest.mark.parametrize("name,steps", PIPELINES, ids=[p[0] for p in PIPELINES])
def test_pipeline_gives_kenlms_files(name, steps, corpus, tmp_path):
    a, b = tmp_path / "kenlm", tmp_path / "nplm"
    a.mkdir()
    b.mkdir()
    assert run_pipeline(theirs, steps, a, corpus) == run_pipeline(ours, steps, b, corpus) == [0] * len(steps)
    for file in ("lm.arpa", "lm.bin"):
        assert (a / file).read_bytes() == (b / file).read_bytes(), file
    assert (a / "lm.arpa").stat().st_size > 1000


def test_lmplz_streams_to_a_device(corpus, tmp_path):
    """--arpa /dev/stdout into a pipe gives the ARPA KenLM writes on stdout.  The link /dev/stdout is left a link."""
    was_link = os.path.islink("/dev/stdout")
    with open(corpus, "rb") as f:
        k = theirs("lmplz", ["-o", "2", "-S", "64M"], stdin=f)
    with open(corpus, "rb") as f:
        n = ours("lmplz", ["-o", "2", "-S", "64M", "--arpa", "/dev/stdout"], stdin=f)
    assert n.returncode == k.returncode == 0 and n.stdout == k.stdout and len(k.stdout) > 1000
    assert os.path.islink("/dev/stdout") == was_link


# lmplz command lines: (arguments, whether the last line of stderr is compared)
LMPLZ_LINES = [
    ([], False), (["-h"], False), (["--he"], False), (["-o", "2", "-h"], False),
    (["--foo"], True), (["--foo=3"], True), (["-x"], True), (["-o"], True), (["--order"], True),
    (["-o", "2", "-o", "3"], True), (["-o", "abc"], True), (["-o", ""], True), (["--order="], True),
    (["--ORDER", "2"], True), (["--discount_fallback"], True), (["-o", "--discount_fallback"], True),
    (["-o", "2", "--s", "1"], True), (["--v", "1"], True), (["-o", "2", "-hx"], True), (["-ho"], True),
    (["-o", "2", "--skip_symbols=1"], True), (["--help=1"], True), (["--prune"], True),
    (["-o", "2", "--interpolate_unigrams", "x"], True),
    (["-o", "2", "--discount_fallback", "-"], True), (["-o", "2", "--discount_fallback", "", "foo"], True),
    (["-o", "2", "--discount_fallback", "0.3", "0.6", "-", "2"], True),
    (["-o", "2", "--discount_fallback", "4"], True), (["-o", "2", "--discount_fallback", "x"], True),
    (["-o", "2", "-S", "1x"], True), (["-o", "2", "-S", "1.5G"], True), (["-o", "2", "-Sx"], True),
    (["-o", "2", "--sort_block", "x"], True), (["-o", "2", "--vocab_estimate", "x"], True),
    (["-o", "2", "--discount_fallback", "--prune", "0", "-1"], True),
    (["-o", "2", "--discount_fallback", "--prune", "a"], True),
    (["-o", "2", "--discount_fallback", "--prune", "0", "1", "2"], True),
    (["-o", "2", "--discount_fallback", "--prune", "1", "0"], True),
    (["-o", "2", "--vocab_pad", "5", "--interpolate_unigrams", "0"], True),
    (["-o", "2", "--text", "/nonexistent/text"], True),
    (["-o", "2", "--discount_fallback", "--arpa", "/nonexistent/lm.arpa"], True),
    (["-o", "2"], False), (["-o", "2", "-", ""], False),
]
# command lines that build a model from the tiny text (compared byte for byte)
LMPLZ_BUILDS = [
    ["-o", "2", "--discount_fallback"], ["-o3", "--discount_fallback=0.3", "0.6"],
    ["--or=2", "--dis", "-S", "1 G"], ["-o", "2", "--discount_fallback", "--", "0.3"],
    ["-o", "3", "--discount_fallback", "--verbose_header"], ["-o", "2", "--discount_fallback", "-Tfoo"],
    ["-o", "2", "--discount_fallback", "--prune", "0", "1"], ["-o", "2", "--discount_fallback", "--skip_symbols"],
    ["-o", "2", "--discount_fallback", "--interpolate_unigrams", "1", "--vocab_pad", "20"],
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.txt"
    path.write_text("a b c\nb c d\na b\nc a d b\n")
    return path


def compare(name, args, stdin_path, last_line=True):
    with open(stdin_path, "rb") as f:
        k = theirs(name, args, stdin=f)
    with open(stdin_path, "rb") as f:
        n = ours(name, args, stdin=f)
    assert (n.returncode, n.stdout) == (k.returncode, k.stdout), n.stderr.decode()[-500:]
    if last_line and k.stderr.strip():
        # (KenLM's own may carry a source-file prefix: "file.cc:76 in ... threw ...")
        mine, kenlms = (r.stderr.decode().strip().splitlines()[-1] for r in (n, k))
        assert kenlms.endswith(mine.rpartition("what():  ")[2]) and mine

    return k, n


@pytest.mark.parametrize("args,last_line", LMPLZ_LINES, ids=[" ".join(a) or "no-args" for a, _ in LMPLZ_LINES])
def test_lmplz_command_line_as_kenlms(args, last_line, tiny):
    k, n = compare("lmplz", args, tiny, last_line)
    if k.returncode:
        assert n.returncode == k.returncode and not n.stdout


@pytest.mark.parametrize("args", LMPLZ_BUILDS, ids=[" ".join(a) for a in LMPLZ_BUILDS])
def test_lmplz_builds_as_kenlms(args, tiny):
    k, _ = compare("lmplz", args, tiny, last_line=False)
    assert k.returncode == 0 and b"\\data\\" in k.stdout


def test_lmplz_help_is_kenlms(tiny):
    k, n = compare("lmplz", [], tiny, last_line=False)
    assert k.returncode == 1 and n.stderr == k.stderr
    assert b"This machine has" in n.stderr and b"--discount_fallback [=arg(=0.5 1 1.5)]" in n.stderr


def test_lmplz_refuses_unk_in_text(tmp_path):
    text = tmp_path / "unk.txt"
    text.write_text("a <unk> b\nb a\n")
    k, n = compare("lmplz", ["-o", "2", "--discount_fallback"], text)
    assert k.returncode != 0 and b"<unk>" in n.stderr


def test_lmplz_says_which_options_it_ignores(tiny):
    with open(tiny, "rb") as f:
        n = ours("lmplz", ["-o", "2", "--discount_fallback", "--sort_block", "1M", "--block_count", "3"], stdin=f)
    assert n.returncode == 0 and b"--sort_block, --block_count" in n.stderr


BUILD_BINARY_LINES = [
    [], ["--help"], ["-h"], ["-x", "{arpa}", "{out}"], ["-q"], ["foo", "{arpa}", "{out}"],
    ["-q", "8", "{arpa}", "{out}"], ["-b", "8", "trie", "{arpa}", "{out}"], ["-w", "foo", "{arpa}", "{out}"],
    ["{dir}/missing.arpa", "{out}"], ["-r", "a b", "trie", "{arpa}", "{out}"], ["{arpa}", "{out}", "x", "y"],
    ["-u", "x", "{arpa}", "{out}"], ["-p", "0.5", "{arpa}", "{out}"],
    ["-s", "-u", "-20", "{arpa}", "{out}"], ["trie", "{arpa}", "{out}", "-q", "8"],
    ["-q", "4", "-b", "2", "-a", "10", "trie", "{arpa}", "{out}"], ["-p", "3", "-v", "{arpa}", "{out}"],
    ["-w", "mmap", "-T", "{dir}", "-S", "10M", "trie", "{arpa}", "{out}"], ["-a", "22", "trie", "{arpa}", "{out}"],
]


@pytest.fixture(scope="module")
def arpa(corpus, tmp_path_factory):
    path = tmp_path_factory.mktemp("arpa") / "lm.arpa"
    with open(corpus, "rb") as f:
        path.write_bytes(theirs("lmplz", ["-o", "3", "-S", "64M"], stdin=f).stdout)
    return path


@pytest.mark.parametrize("args", BUILD_BINARY_LINES, ids=[" ".join(a) or "no-args" for a in BUILD_BINARY_LINES])
def test_build_binary_as_kenlms(args, arpa, tmp_path):
    outputs = {}
    for side, run in (("kenlm", theirs), ("nplm", ours)):
        folder = tmp_path / side
        folder.mkdir()
        argv = [a.format(arpa=arpa, out=folder / "lm.bin", dir=folder) for a in args]
        result = run("build_binary", argv)
        made = folder / "lm.bin"
        outputs[side] = (result.returncode, made.read_bytes() if made.exists() and not result.returncode else None)
        if side == "kenlm":
            usage = result.stderr.decode().partition("Usage: ")[2].partition(" ")[2]
        elif usage:
            assert result.stderr.decode().partition("Usage: ")[2].partition(" ")[2] == usage
    assert outputs["nplm"] == outputs["kenlm"]


@pytest.mark.parametrize("args", [["--foo", "a", "b"], ["-x", "a"], ["a", "b", "-q"], ["-:", "a"], ["-sq"]])
def test_build_binary_option_errors_as_kenlms(args):
    k, n = theirs("build_binary", args), ours("build_binary", args)
    assert n.returncode == k.returncode != 0
    # glibc's message after the program's name, which differs (KenLM's path)
    assert n.stderr.splitlines()[0].partition(b": ")[2] == k.stderr.splitlines()[0].partition(b": ")[2]


@pytest.mark.parametrize("options", [[], ["-q", "4", "-a", "10", "-p", "2"], ["-q", "5", "-b", "3"]])
def test_build_binary_memory_estimate_as_kenlms(options, arpa):
    k, n = (run("build_binary", options + [str(arpa)]) for run in (theirs, ours))
    assert n.returncode == k.returncode == 0 and n.stderr == k.stderr
    assert k.stderr.startswith(b"Memory estimate for binary LM:\ntype ")


@pytest.mark.parametrize("order", [1, 2, 4])
def test_count_ngrams_as_kenlms(order, corpus, tmp_path):
    results = []
    for run in (theirs, ours):
        vocab = tmp_path / f"{run.__name__}.vocab"
        with open(corpus, "rb") as f:
            result = run("count_ngrams", ["-o", str(order), "--write_vocab_list", str(vocab)], stdin=f)
        results.append((result.returncode, result.stdout, vocab.read_bytes()))
    assert results[0] == results[1]
    assert len(results[0][1]) > 1000 and results[0][2].startswith(b"<unk>\0<s>\0</s>\0")


def vocab_table(path, words, leave_out=()):
    """KenLM's probing vocabulary table of ``words`` (<unk> <s> </s> 0 1 2, the others
    shuffled ids from 3): a uint64 size, then {uint64 MurmurHash64A, uint32 id}
    buckets, linear probing from hash % buckets."""
    from nplm.backoff.kenlm._klm import hash_word

    words = ["<unk>", "<s>", "</s>"] + [w for w in words if w not in leave_out]
    ids = np.arange(len(words))
    ids[3:] = 3 + np.random.default_rng(0).permutation(len(words) - 3)
    buckets = int(len(words) * 1.7) + 1
    table = np.zeros(buckets, dtype=[("key", "<u8"), ("value", "<u4")])
    for word, i in zip(words, ids):
        h = hash_word(word.encode())
        b = h % buckets
        while table[b]["key"]:
            b = (b + 1) % buckets
        table[b] = (h, i)
    path.write_bytes(np.uint64(len(words)).tobytes() + table.tobytes())


@pytest.mark.parametrize("order", [1, 3])
@pytest.mark.parametrize("leave_out", [(), ("said",)], ids=["every-word", "a-word-missing"])
def test_count_ngrams_read_vocab_table_as_kenlms(order, leave_out, corpus, tmp_path):
    """The text's n-grams in a given table's ids: KenLM's records byte for byte; a word
    the table lacks is <unk> to KenLM, which aborts naming it."""
    words = sorted({w for line in corpus.read_text().splitlines() for w in line.split()})
    assert "said" in words          # (the word a-word-missing leaves out)
    vocab_table(tmp_path / "vocab.table", words, leave_out)
    k, n = compare("count_ngrams", ["-o", str(order), "--read_vocab_table", str(tmp_path / "vocab.table")], corpus,
                   last_line=bool(leave_out))
    assert k.returncode == (-6 if leave_out else 0)     # (SIGABRT)
    assert leave_out or len(k.stdout) > 1000


@pytest.mark.parametrize("args", [[], ["-h"], ["-o", "2"], ["--write_vocab_list", "x"], ["-o", "x"], ["-o", "2", "--foo"],
                                  ["-o", "2", "-S", "5x", "--write_vocab_list", "{dir}/v"],
                                  ["-o", "2", "--write_vocab_list", "{dir}/v", "--read_vocab_table", "y"],
                                  ["-o", "2", "--read_vocab_table", "{dir}/none"]])
def test_count_ngrams_command_line_as_kenlms(args, tiny, tmp_path):
    args = [a.format(dir=tmp_path) for a in args]
    k, n = compare("count_ngrams", args, tiny)
    if not args or args == ["-h"]:
        assert n.stderr == k.stderr


def test_fragment_as_kenlms(arpa, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("the company said\n\nno  it is n't\nzzz unknown words\n")
    binary = tmp_path / "lm.bin"
    assert theirs("build_binary", [str(arpa), str(binary)]).returncode == 0
    for model in (arpa, binary):
        k, _ = compare("fragment", [str(model)], lines, last_line=False)
        assert k.returncode == 0 and len(k.stdout.splitlines()) == 4
    compare("fragment", [], lines)
    trie = tmp_path / "lm.trie"
    assert theirs("build_binary", ["trie", str(arpa), str(trie)]).returncode == 0
    compare("fragment", [str(trie)], lines)     # "Model type not supported yet."


def test_lmplz_limit_vocab_file_as_kenlms(corpus, tmp_path):
    vocab = tmp_path / "vocab.txt"
    words = corpus.read_text().split()
    vocab.write_text(" ".join(sorted(set(words[:2000]))) + "\n")
    k, _ = compare("lmplz", ["-o", "3", "-S", "64M", "--limit_vocab_file", str(vocab), "--prune", "0", "0", "1"],
                   corpus, last_line=False)
    assert k.returncode == 0 and len(k.stdout) > 1000


def test_installed_names_are_the_programs():
    """Every program of PROGRAMS is installed under its name, a script that runs its
    module's main (query's ``script``: its main, then an exit without interpreter
    teardown), and nothing else is installed from nplm/cli/kenlm/bin."""
    folder = ROOT / "nplm" / "cli" / "kenlm" / "bin"
    assert sorted(p.name for p in folder.iterdir()) == sorted(PROGRAMS)
    for name, module in PROGRAMS.items():
        function = "script" if name == "query" else "main"
        for script in (folder / name, Path(installed_program(name))):
            text = script.read_text()
            assert f"from {module} import {function}\n" in text and text.endswith(f"sys.exit({function}())\n")
    for name in MINE:
        assert callable(__import__(PROGRAMS[name], fromlist=["main"]).main)


@pytest.mark.parametrize("text,error", [("1.5G", "more than two characters"), ("x", "leading number"),
                                        ("5 G x", "more cruft x"), ("3Q", "allowed suffixes")])
def test_parse_size_refuses_as_kenlm(text, error, tiny):
    with pytest.raises(ValueError, match=error):
        po.parse_size(text)
    with open(tiny, "rb") as f:
        k = theirs("lmplz", ["-o", "2", "-S", text], stdin=f)
    assert k.returncode == 1 and error in k.stderr.decode()


def test_parse_size_units():
    """K is the default unit, b bytes, powers of 1024 up; % of physical memory."""
    assert po.parse_size("100") == 100 << 10
    assert po.parse_size("7b") == 7
    assert po.parse_size("8G") == 8 << 30 == po.parse_size("8 G")
    assert po.parse_size("2k") == 2048
    mem = po.physical_memory()
    assert po.parse_size("20%") == int(20.0 * mem / 100.0)


def test_run_in_process(capsys):
    """nplm.cli.kenlm.run (what `nplm lmplz ...` calls) gives the program's exit code
    and messages."""
    assert run_program("lmplz", ["--foo"]) == 1
    assert capsys.readouterr().err == "unrecognised option '--foo'\n"
    assert run_program("build_binary", []) == 1
    assert capsys.readouterr().err.startswith("Usage: build_binary [-u log10_unknown_probability]")
    assert run_program("count_ngrams", ["-h"]) == 1
    assert "corpus count:" in capsys.readouterr().err
