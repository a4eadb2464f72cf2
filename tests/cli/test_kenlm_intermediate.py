"""lmplz --intermediate and --renumber against KenLM's lmplz: the intermediate files
(BASE.kenlm_intermediate, BASE.vocab, BASE.1 .. BASE.N) and the renumbered ARPA byte
for byte; KenLM's interpolate, and nplm's, on nplm's files as on KenLM's."""

import os
import subprocess

import pytest

from nplm.backoff.kenlm import intermediate
from nplm.backoff.tables import NGramTables

from helpers import REFERENCE, installed_program, kenlm_program, zipf_text

pytestmark = pytest.mark.slow


def ours(name, args, cwd, stdin=None):
    return subprocess.run([installed_program(name), *args], stdin=stdin, capture_output=True, cwd=cwd,
                          timeout=600)


def theirs(name, args, cwd, stdin=None):
    return subprocess.run([kenlm_program(name), *args], stdin=stdin, capture_output=True, cwd=cwd, timeout=600)


def files(folder, base, order):
    return {os.path.basename(p): open(p, "rb").read() for p in intermediate.file_names(folder / base, order)}


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """big.txt: the first 1,500 lines of PTB train (<unk> as UNK, which lmplz accepts)
    where ../shared is, else Zipf-distributed words; tiny.txt: a few sentences that
    need --discount_fallback; other.txt: Zipf text partly of other words."""
    d = tmp_path_factory.mktemp("texts")
    if (REFERENCE / "ptb5k.txt").is_file():
        with open(REFERENCE / "ptb5k.txt", "rb") as f:
            (d / "big.txt").write_bytes(b"".join(f.readlines()[:1500]))
    else:
        zipf_text(d / "big.txt", 7, words=3000, sentences=1500, longest=25)
    (d / "tiny.txt").write_text("the cat sat on the mat\nthe dog sat on the log\na cat and a dog\nthe cat ran\n")
    zipf_text(d / "other.txt", 3, words=800, sentences=400, longest=25, offset=300)
    return d


CASES = [
    ("big.txt", 1, []),
    ("big.txt", 2, []),
    ("big.txt", 3, []),
    ("big.txt", 4, ["--prune", "0", "1", "1"]),
    ("big.txt", 5, ["--prune", "0", "0", "1", "2"]),
    ("big.txt", 3, ["--interpolate_unigrams", "0"]),
    ("big.txt", 3, ["--vocab_pad", "30000"]),
    ("big.txt", 3, ["--renumber", "-S", "20%"]),
    ("tiny.txt", 3, ["--discount_fallback"]),
    ("tiny.txt", 4, ["--discount_fallback", "0.3", "0.9"]),
    ("other.txt", 4, ["--discount_fallback", "--prune", "0", "1"]),
    ("big.txt", 1, ["--collapse_values"]),
    ("big.txt", 3, ["--collapse_values"]),
    ("big.txt", 5, ["--collapse_values", "--prune", "0", "1", "1"]),
    ("tiny.txt", 4, ["--collapse_values", "--discount_fallback", "0.2"]),
]


@pytest.mark.parametrize("text,order,extra", CASES, ids=lambda c: str(c) if not isinstance(c, list) else " ".join(c))
def test_intermediate_files_are_kenlms(texts, tmp_path, text, order, extra):
    sides = {}
    for name, run in (("kenlm", theirs), ("nplm", ours)):
        d = tmp_path / name
        d.mkdir()
        args = ["-o", str(order), "--text", str(texts / text), "--intermediate", "m", "--arpa", "m.arpa"] + extra
        r = run("lmplz", args, d)
        assert r.returncode == 0, r.stderr.decode()[-800:]
        assert r.stdout == b""
        sides[name] = files(d, "m", order), (d / "m.arpa").read_bytes(), sorted(os.listdir(d))
    (k_files, k_arpa, k_list), (n_files, n_arpa, n_list) = sides["kenlm"], sides["nplm"]
    assert n_list == k_list
    for name in k_files:
        assert n_files[name] == k_files[name], name
    assert n_arpa == k_arpa


@pytest.mark.parametrize("extra", [[], ["--verbose_header"]], ids=["plain", "verbose_header"])
def test_renumbered_arpa_is_kenlms(texts, extra):
    args = ["-o", "4", "--renumber", "--prune", "0", "0", "1"] + extra
    with open(texts / "big.txt", "rb") as f:
        k = theirs("lmplz", args, texts, stdin=f)
    with open(texts / "big.txt", "rb") as f:
        n = ours("lmplz", args, texts, stdin=f)
    with open(texts / "big.txt", "rb") as f:
        plain = ours("lmplz", args[:2] + args[3:], texts, stdin=f)
    assert k.returncode == 0 and b"\\data\\" in k.stdout
    assert (n.returncode, n.stdout) == (0, k.stdout)
    # the same model, in another order of lines
    assert plain.stdout != n.stdout and sorted(plain.stdout.split(b"\n")) == sorted(n.stdout.split(b"\n"))


@pytest.mark.parametrize("extra", [
    ["-o", "2"], ["-o", "4", "--prune", "0", "0", "1"], ["-o", "3", "--interpolate_unigrams", "0"],
    ["-o", "5", "--vocab_pad", "30000", "--renumber"]], ids=lambda a: " ".join(a))
def test_collapsed_arpa_is_kenlms(texts, extra):
    """--collapse_values: q for the probability, 0 for every back-off."""
    args = ["--collapse_values"] + extra
    with open(texts / "big.txt", "rb") as f:
        k = theirs("lmplz", args, texts, stdin=f)
    with open(texts / "big.txt", "rb") as f:
        n = ours("lmplz", args, texts, stdin=f)
    assert k.returncode == 0 and b"\\data\\" in k.stdout
    assert (n.returncode, n.stdout) == (0, k.stdout), n.stderr.decode()[-800:]


def test_spilled_estimate_writes_the_same_files(texts, tmp_path):
    """nplm's part-by-part estimation (a budget the counts outgrow) gives the files too."""
    args = ["-o", "4", "--text", str(texts / "big.txt"), "--intermediate", "m"]
    (tmp_path / "k").mkdir()
    (tmp_path / "n").mkdir()
    assert theirs("lmplz", args, tmp_path / "k").returncode == 0
    n = ours("lmplz", args + ["-S", "1M", "-T", str(tmp_path)], tmp_path / "n")
    assert n.returncode == 0, n.stderr.decode()[-800:]
    assert files(tmp_path / "n", "m", 4) == files(tmp_path / "k", "m", 4)
    assert sorted(os.listdir(tmp_path)) == ["k", "n"]       # no temporary left
    # q needs the whole model in memory at once
    n = ours("lmplz", args + ["-S", "1M", "-T", str(tmp_path), "--collapse_values"], tmp_path / "n")
    assert n.returncode == 1 and b"collapse_values needs the model estimated in memory" in n.stderr
    assert sorted(os.listdir(tmp_path)) == ["k", "n"]


@pytest.fixture(scope="module")
def both(texts, tmp_path_factory):
    """Intermediate files of three models, by KenLM's lmplz in k/ and nplm's in n/."""
    d = tmp_path_factory.mktemp("both")
    for side, run in (("k", theirs), ("n", ours)):
        (d / side).mkdir()
        for base, order, text in (("b2", 2, "big.txt"), ("b3", 3, "big.txt"), ("o3", 3, "other.txt")):
            r = run("lmplz", ["-o", str(order), "--discount_fallback", "--text", str(texts / text),
                              "--intermediate", base], d / side)
            assert r.returncode == 0, r.stderr.decode()[-800:]
    return d


@pytest.mark.parametrize("args", [
    ["-m", "b2", "b3", "-w", "0.4", "0.6"],
    ["-m", "b3", "o3", "b2", "-w", "0.7", "0.5", "-0.1"],
], ids=lambda a: " ".join(a))
def test_interpolate_takes_nplms_files(both, args):
    k = theirs("interpolate", args, both / "k")
    assert k.returncode == 0 and b"\\data\\" in k.stdout
    assert theirs("interpolate", args, both / "n").stdout == k.stdout
    n = ours("interpolate", args, both / "n")
    assert (n.returncode, n.stdout) == (0, k.stdout), n.stderr.decode()[-800:]


def test_read_gives_back_what_was_written(both, tmp_path):
    words, ids, prob, backoff, payload = intermediate.read(both / "n" / "b3")
    assert payload == b"pb" and words[0] == b"<unk>"
    tables = NGramTables(vocab=[w.decode() for w in words], ids=ids, logprob=prob, backoff=backoff)
    intermediate.write(tmp_path / "again", tables)
    for name, data in files(both / "n", "b3", 3).items():
        assert (tmp_path / name.replace("b3", "again")).read_bytes() == data


def test_interpolate_refuses_q(both, tmp_path):
    """(KenLM's interpolate reads q as a probability and prints NaN back-offs)"""
    tiny = tmp_path / "t.txt"
    tiny.write_text("a b c\nb c a\n")
    r = ours("lmplz", ["-o", "2", "--discount_fallback", "--text", str(tiny), "--collapse_values",
                       "--intermediate", "q"], tmp_path)
    assert r.returncode == 0 and (tmp_path / "q.kenlm_intermediate").read_bytes().endswith(b"Payload q\n")
    n = ours("interpolate", ["-m", "q", str(both / "n" / "b2"), "-w", "0.5", "0.5"], tmp_path)
    assert n.returncode == 1 and b"payload q" in n.stderr and not n.stdout


def test_errors_name_the_flag_or_file(texts, tmp_path):
    tiny = str(texts / "tiny.txt")
    n = ours("lmplz", ["-o", "2", "--discount_fallback", "--text", tiny, "--intermediate", "nowhere/m"], tmp_path)
    assert n.returncode == 1 and b"nowhere/m.vocab" in n.stderr
    limit = tmp_path / "limit"
    limit.write_text("the cat\n")
    for flag in (["--intermediate", "m"], ["--renumber"]):
        n = ours("lmplz", ["-o", "2", "--discount_fallback", "--text", tiny, "--limit_vocab_file", str(limit)]
                 + flag, tmp_path)
        assert n.returncode == 1 and flag[0].encode() in n.stderr and b"--limit_vocab_file" in n.stderr
    # a text lmplz refuses leaves no file behind
    bad = tmp_path / "bad.txt"
    bad.write_text("a <unk> b\n")
    n = ours("lmplz", ["-o", "2", "--discount_fallback", "--text", str(bad), "--intermediate", "m"], tmp_path)
    assert n.returncode != 0 and b"<unk>" in n.stderr
    assert sorted(os.listdir(tmp_path)) == ["bad.txt", "limit"]
