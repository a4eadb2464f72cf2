"""interpolate (KenLM's log-linear interpolation program, under its name) against
KenLM's own: the ARPA written for given weights byte for byte, tuned weights within
KenLM's float32 noise, the command line's errors and exit codes."""

import os
import subprocess
import sys

import numpy as np
import pytest

from nplm.backoff.arpa import read_arpa
from nplm.cli.kenlm import PROGRAMS
from nplm.cli.kenlm.interpolate import munge_weights

from helpers import ROOT, installed_program, kenlm_program, zipf_text

pytestmark = pytest.mark.slow


def ours(args, cwd):
    return subprocess.run([installed_program("interpolate"), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, cwd=cwd, timeout=600)


def theirs(args, cwd):
    return subprocess.run([kenlm_program("interpolate"), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """KenLM's lmplz intermediate files (and ARPA files) of small texts: a2 (bigrams)
    and b3 (trigrams) of one text, c3 and c4 of a text with other words too; t is a
    tuning text, with words no model knows."""
    d = tmp_path_factory.mktemp("interp")
    zipf_text(d / "a.txt", 1, words=800, sentences=400, longest=15)
    zipf_text(d / "c.txt", 2, words=800, sentences=400, longest=15, offset=300)
    zipf_text(d / "t.txt", 3, words=800, sentences=60, longest=15, offset=100)
    lmplz = kenlm_program("lmplz")
    for name, order, text in (("a2", 2, "a.txt"), ("b3", 3, "a.txt"), ("c3", 3, "c.txt"), ("c4", 4, "c.txt")):
        with open(d / text, "rb") as f:
            subprocess.run([lmplz, "-o", str(order), "-S", "10%", "--discount_fallback", "--intermediate", name,
                            "--arpa", f"{name}.arpa"], stdin=f, cwd=d, check=True, capture_output=True)
    return d


@pytest.mark.parametrize("args", [
    ["-m", "a2", "b3", "-w", "0.4", "0.6"],
    ["-m", "b3", "a2", "-w", "1.2", "-0.3"],
    ["-m", "b3", "-w", "1"],
    ["-m", "a2", "b3", "c3", "-w", "0.3", "0.3", "0.5"],      # other words: KenLM's <unk> rule
    ["-m", "c3", "-m", "b3", "-w", "0.5", "-w", "0.5"],
    ["-m", "a2", "b3", "--weight", "0.5", "-.25", "-T", "/tmp/x", "-S", "10M", "--sort_block", "1M"],
], ids=lambda a: " ".join(a))
def test_arpa_is_kenlms(args, models):
    k, n = theirs(args, models), ours(args, models)
    assert k.returncode == 0 and b"\\data\\" in k.stdout
    assert (n.returncode, n.stdout) == (k.returncode, k.stdout), n.stderr.decode()[-500:]
    assert n.stderr.decode().splitlines() == ["Merging probabilities.", "Normalizing", "Reunifying backoffs"]


def test_arpa_files_in_give_the_same_arpa(models):
    """(nplm's extension: ARPA files where KenLM takes intermediate files)"""
    k = theirs(["-m", "b3", "c3", "-w", "0.6", "0.5"], models)
    n = ours(["-m", "b3.arpa", "c3.arpa", "-w", "0.6", "0.5"], models)
    assert n.returncode == 0 and n.stdout == k.stdout


def test_where_kenlm_aborts_the_table_is_the_exact_mixture(models):
    """Models of different orders over different vocabularies: KenLM's interpolate
    aborts ("Streams were not the same size during merging"); nplm writes the table,
    which scores as nplm's dynamic log-linear mixture with KenLM's <unk> rule does."""
    args = ["-m", "a2", "c4", "-w", "0.7", "0.4"]
    k = theirs(args, models)
    assert k.returncode != 0 and b"not the same size" in k.stderr
    n = ours(args, models)
    assert n.returncode == 0
    (models / "mix.arpa").write_bytes(n.stdout)
    import nplm
    from nplm.compose.interpolate import interpolate

    table = nplm.Model(str(models / "mix.arpa"))
    mix = interpolate([str(models / "a2.arpa"), str(models / "c4.arpa")], [0.7, 0.4], "loglinear",
                      unknown="unk")
    lines = (models / "t.txt").read_text().splitlines()[:40] + (models / "c.txt").read_text().splitlines()[:40]
    for line in lines:
        a = [s[0] for s in table.full_scores(line)]
        b = [s[0] for s in mix.full_scores(line)]
        np.testing.assert_allclose(a, b, atol=2e-5)


def weights_of(out):
    return np.array([float(x) for x in out.split()])


def test_tuned_weights_are_kenlms(models):
    """--just_tune prints the weights on stdout: KenLM's within its float32 arithmetic
    (KenLM tunes in float32; nplm in double, along the same ten Newton steps)."""
    args = ["-m", "a2", "b3", "c4", "-t", "t.txt", "--just_tune"]
    k, n = theirs(args, models), ours(args, models)
    assert k.returncode == n.returncode == 0
    assert k.stdout.startswith(b" ") and n.stdout.startswith(b" ") and n.stdout.endswith(b"\n")
    np.testing.assert_allclose(weights_of(n.stdout), weights_of(k.stdout), atol=2e-3, rtol=1e-3)
    mine = [line for line in n.stderr.decode().splitlines() if line.startswith(("Processing", "Iteration"))]
    assert len(mine) == 13 and mine[0] == "Processing model 0/3: a2"
    ppl = [float(line.split("=")[1]) for line in n.stderr.decode().splitlines() if line.startswith("Perplexity")]
    kppl = [float(line.split("=")[1]) for line in k.stderr.decode().splitlines() if line.startswith("Perplexity")]
    np.testing.assert_allclose(ppl, kppl, rtol=1e-4)


def test_tuned_arpa_is_kenlms_within_print_precision(models):
    """Tuned then written: the same n-grams; values as close as the tuned weights are."""
    args = ["-m", "a2", "b3", "c3", "-t", "t.txt"]
    k, n = theirs(args, models), ours(args, models)
    assert k.returncode == n.returncode == 0
    kw = weights_of(k.stderr.decode().split("Final weights:")[1].splitlines()[0])
    nw = weights_of(n.stderr.decode().split("Final weights:")[1].splitlines()[0])
    np.testing.assert_allclose(nw, kw, atol=2e-3, rtol=1e-3)
    (models / "k.arpa").write_bytes(k.stdout)
    (models / "n.arpa").write_bytes(n.stdout)
    a, b = read_arpa(models / "k.arpa"), read_arpa(models / "n.arpa")
    assert a.vocab == b.vocab
    for x, y, p, q, s, t in zip(a.ids, b.ids, a.logprob, b.logprob, a.backoff, b.backoff):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_allclose(q, p, atol=1e-3)
        np.testing.assert_allclose(t, s, atol=1e-3)


def test_given_weights_match_byte_for_byte_after_tuning(models):
    """KenLM's tuned weights given back with -w: the bytes of KenLM's ARPA."""
    k = theirs(["-m", "b3", "c3", "-t", "t.txt", "--just_tune"], models)
    w = k.stdout.decode().split()
    args = ["-m", "b3", "c3", "-w", *w]
    assert ours(args, models).stdout == theirs(args, models).stdout


@pytest.mark.parametrize("args", [
    [], ["-h"], ["--help"], ["-w", "1"], ["-m", "a2"], ["-m", "a2", "b3", "-w", "0.5"],
    ["-m", "a2", "b3", "-w", "0.5", "0.5", "-t", "t.txt"], ["-m", "nope", "-w", "1"],
    ["-m", "a2", "-w", "x"], ["-m", "a2", "-w", "1", "-S", "1.5G"], ["-m", "a2", "b3", "-t", "nofile"],
    ["-m", "a2", "-w", "1", "--bogus"], ["-m", "a2", "b3", "-w", "0.5", "--just_tune", "-0.2"],
    ["-m", "a2", "b3", "-w", "0.5", "-0.5", "--just_tune"], ["-m", "a2", "-w", "1", "-T"],
    ["-m", "a2", "b3", "-t", "bad.txt"], ["-m", "a2", "b3", "-w", "0.5", "-t", "t.txt", "--just_tune"],
], ids=lambda a: " ".join(a) or "no-args")
def test_command_line_as_kenlms(args, models):
    (models / "bad.txt").write_text("a b\n\nthe <s> x\n")
    k, n = theirs(args, models), ours(args, models)
    assert (n.returncode, n.stdout) == (k.returncode, k.stdout), n.stderr.decode()[-500:]
    if k.returncode:
        last = n.stderr.decode().strip().splitlines()[-1]
        assert k.stderr.decode().strip().splitlines()[-1].endswith(last) and last
    if not args or "-h" in args:
        assert n.stderr == k.stderr


def test_munged_weights():
    """KenLM's MungeWeightArgs: negative numbers after -w get a -w of their own."""
    assert munge_weights(["-w", "-1", "-2", "0.5", "-.5", "-m", "-3"]) == \
        ["-w", "-1", "-w", "-2", "0.5", "-w", "-.5", "-m", "-3"]
    assert munge_weights(["--weight", "1", "-1e-3"]) == ["--weight", "1", "-w", "-1e-3"]


def test_nplm_interpolate_stays_nplms_own_command():
    from nplm.cli.common import COMMANDS
    from nplm.cli.main import build_parser

    assert "interpolate" in PROGRAMS and "interpolate" in COMMANDS
    build_parser()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "nplm.cli.main", "interpolate", "--help"], capture_output=True,
                       env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and b"Log-linear interpolation options" not in r.stdout + r.stderr
