"""The command line's behaviour at its edges: output names, broken pipes, --help and
--version, and the messages for bad input (a clear line naming the file, never a
traceback)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nplm
from nplm.cli.main import main
from nplm.io import container

from helpers import ROOT, linear_spec, make_net, quiet_config, run_cli

TOY = ROOT / "examples" / "toy.txt"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A back-off ARPA and binary of the toy text, and two neural nets (a full-context
    softmax one that ISI can hold, and a class-output one that it cannot)."""
    d = tmp_path_factory.mktemp("models")
    out = {"arpa": d / "kn.arpa", "binary": d / "kn.nplm", "softmax": d / "softmax.nplm",
           "class": d / "class.nplm"}
    nplm.estimate(str(TOY), 3, arpa=str(out["arpa"]), binary=str(out["binary"]), discount_fallback=True)
    make_net("softmax-full-2", order=3).save(out["softmax"])
    make_net("class-full-1", order=3).save(out["class"])
    return {k: str(v) for k, v in out.items()}


SENTENCES = ["w1 w2 w3", "w5 zzqx w0 w7", "", "the cat sat on the mat"]


def same_scores(a, b, tol=1e-5):
    ma, mb = nplm.Model(a, quiet_config()), nplm.Model(b, quiet_config())
    assert ma.order == mb.order
    for s in SENTENCES:
        x = [p for p, _, _ in ma.full_scores(s)]
        y = [p for p, _, _ in mb.full_scores(s)]
        assert np.allclose(x, y, atol=tol), (s, x, y)


# --- convert: an output named .nplm is an nplm binary ------------------------------


@pytest.mark.parametrize("kind, fmt", [("binary", "binary"), ("arpa", "binary"), ("softmax", "neural"),
                                       ("class", "neural")])
def test_convert_to_dot_nplm_writes_an_nplm_binary(models, tmp_path, capsys, kind, fmt):
    out = tmp_path / "out.nplm"
    assert main(["convert", models[kind], str(out)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().err.split(",")[0].strip().endswith(f"-> {fmt}")
    assert container.is_container(out)
    assert main(["verify", str(out)]) == 0
    assert ": OK" in capsys.readouterr().out
    same_scores(models[kind], out)


def test_convert_quantised_names_apply_to_neural_models_only(models, tmp_path, capsys):
    for to in ("float16", "int8"):
        assert main(["convert", models["binary"], str(tmp_path / "x"), "--to", to]) == 1
        err = capsys.readouterr().err
        assert "quantise neural models only" in err and "back-off model" in err and "distil" not in err
    assert main(["convert", models["softmax"], str(tmp_path / "x.arpa")]) == 1
    assert "nplm distil" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_convert_reads_an_arpa_from_a_pipe_once(models, tmp_path):
    """/dev/stdin is read once: its format is sniffed from the stream that then reads
    it, so the output is the file's own conversion; a binary, which is memory-mapped,
    is refused from a pipe with the reason."""
    direct = tmp_path / "direct.arpa"
    assert run_cli("convert", models["arpa"], direct).returncode == 0
    with open(models["arpa"], "rb") as f:
        r = run_cli("convert", "/dev/stdin", tmp_path / "piped.arpa", stdin=f.read())
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "piped.arpa").read_bytes() == direct.read_bytes()
    with open(models["binary"], "rb") as f:
        r = run_cli("convert", "/dev/stdin", tmp_path / "b.arpa", stdin=f.read())
    assert r.returncode == 1 and b"Traceback" not in r.stderr
    assert b"/dev/stdin" in r.stderr and b"regular file" in r.stderr, r.stderr
    assert not (tmp_path / "b.arpa").exists()


# --- stdout closed early, --help, --version ----------------------------------------


def test_query_into_a_closed_pipe_exits_quietly(models, tmp_path):
    """``nplm query ... | head -1``: the status of a tool killed by SIGPIPE, no message."""
    text = tmp_path / "t.txt"
    text.write_text("w1 w2 w3 the cat\n" * 20000)      # ~2 MB of output, beyond any pipe buffer
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "nplm", "query", models["binary"], "--text", str(text)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    assert p.stdout.readline().startswith(b"w1=")
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141
    assert err == "", err


def test_help_and_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"nplm {nplm.__version__}"
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert "n-gram language models" in out and "--version" in out and "``" not in out
    assert "the work lives in" not in out


@pytest.mark.parametrize("argv, usage, message", [
    (["quer", "m.arpa"], "nplm: error: ", "unknown command 'quer'; did you mean 'nplm query'?"),
    (["frobnicate"], "nplm: error: ", "unknown command 'frobnicate' (commands: query, perplexity"),
    (["query", "m.arpa", "--txt", "t"], "nplm query: error: ",
     "nplm query: error: unrecognized arguments: --txt t (--txt: did you mean --text?)"),
    (["estimate", "-o", "3", "--discount-fallbak"], "nplm estimate: error: ",
     "(--discount-fallbak: did you mean --discount-fallback?)"),
    (["--verison"], "nplm: error: ", "--verison: did you mean --version?"),
    (["perplexity", "examples/toy.arpa", "--text", "absent.txt"], "nplm perplexity: error: ",
     "absent.txt"),
])
def test_unknown_commands_and_options_suggest_the_right_one(capsys, argv, usage, message):
    """argparse alone lists every command for a typo'd one, and blames a subcommand's
    unknown option on the top-level parser; here each usage error is one line naming
    the problem, with the hint where the full usage is."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith(usage) and message in err, err
    assert err.count("\n") == 1 and err.rstrip().endswith("--help')"), err


# --- models that cannot be read ------------------------------------------------------

BANNER = "Loading the LM will be faster"


def test_truncated_nplm_binary_is_called_truncated(models, tmp_path):
    t = tmp_path / "t.nplm"
    t.write_bytes(Path(models["binary"]).read_bytes()[:7])
    r = run_cli("query", t, stdin="a b\n")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "truncated or damaged nplm binary" in r.stderr and "load it with" not in r.stderr
    assert BANNER not in r.stderr
    r = run_cli("convert", t, tmp_path / "x.arpa")
    assert r.returncode == 1 and "truncated or damaged nplm binary" in r.stderr


def test_no_banner_before_an_error(tmp_path, models):
    r = run_cli("query", tmp_path / "missing.arpa", stdin="a\n")
    assert r.returncode == 1 and "No such file" in r.stderr and BANNER not in r.stderr
    r = run_cli("query", models["arpa"], stdin="a\n")
    assert r.returncode == 0 and r.stderr.startswith(BANNER)       # KenLM's advice, for an ARPA that loaded
    r = run_cli("query", models["binary"], stdin="a\n")
    assert r.returncode == 0 and BANNER not in r.stderr


def test_kenlm_binary_messages(tmp_path):
    """A KenLM binary where an ARPA is wanted says how to use it; a damaged one (here:
    the magic, then bytes that are not KenLM's test values) says what is wrong."""
    k = tmp_path / "lm.binary"
    k.write_bytes(b"mmap lm http://kheafield.com/code format version 5\n\0" + bytes(range(256)) * 8)
    for args in (("query", k), ("convert", k, tmp_path / "x.arpa")):
        r = run_cli(*args, stdin="a\n")
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "KenLM binary from a build with other type sizes" in r.stderr, r.stderr
        assert BANNER not in r.stderr
    r = run_cli("build-binary", k, tmp_path / "x.nplm")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "KenLM binary file, not an ARPA file" in r.stderr and "nplm convert" in r.stderr, r.stderr


def test_truncated_compressed_arpa_is_one_message(models, tmp_path):
    import lzma
    t = tmp_path / "t.arpa.xz"
    t.write_bytes(lzma.compress(Path(models["arpa"]).read_bytes())[:-64])
    r = run_cli("query", t, stdin="a\n")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and line.count("corrupt or truncated compressed data") == 1, line
    assert f"({t}: corrupt" in line and not re.search(re.escape(str(t)) + r":\d", line), line  # no line number


# --- build-binary -p -----------------------------------------------------------------


@pytest.mark.parametrize("p, message", [("nan", "finite number > 1.0, not nan"), ("inf", "not inf"),
                                        ("1.0", "not 1.0"), ("0.5", "not 0.5"),
                                        ("1e12", "of memory but only"), ("1e300", "would need about")])
def test_build_binary_multiplier_is_checked(models, tmp_path, capsys, p, message):
    out = tmp_path / "m.nplm"
    assert main(["build-binary", models["arpa"], str(out), "-p", p]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_build_binary_multiplier_in_range_builds(models, tmp_path):
    out = tmp_path / "m.nplm"
    assert main(["build-binary", models["arpa"], str(out), "-p", "3"]) == 0
    same_scores(models["arpa"], out)


def test_probing_memory_is_checked_in_the_library_too(models):
    from nplm.backoff import arpa
    from nplm.backoff import binary as backoff
    tables = arpa.read_arpa(models["arpa"])
    with pytest.raises(OSError, match="probing hash tables"):
        backoff.from_tables(tables, 1e12)
    with pytest.raises(ValueError, match="finite"):
        backoff.from_tables(tables, float("nan"))


# --- text that is not UTF-8, or empty -------------------------------------------------


@pytest.fixture
def bad_text(tmp_path):
    t = tmp_path / "bad.txt"
    t.write_bytes(b"the cat\nab\xe9cd x\n")
    return t


def _one_clear_error(capsys, where):
    err = capsys.readouterr().err
    assert err.startswith(f"nplm: error: {where}: invalid UTF-8 (byte 0xe9 at byte 3 of the line)"), err
    assert "codec" not in err and "Traceback" not in err


@pytest.mark.parametrize("compress", [False, True])
def test_distil_names_the_line_of_invalid_utf8(models, bad_text, tmp_path, capsys, compress):
    if compress:
        import gzip
        gz = tmp_path / "bad.txt.gz"
        gz.write_bytes(gzip.compress(bad_text.read_bytes()))
        bad_text = gz
    for flag in ("--text", "--sample-text"):
        out = tmp_path / "d.arpa"
        assert main(["distil", models["binary"], flag, str(bad_text), "--order", "2", "--arpa", str(out), "-q"]) == 1
        _one_clear_error(capsys, f"{bad_text}:2")
        assert not out.exists()


def test_precompute_and_tune_name_the_line_of_invalid_utf8(models, bad_text, tmp_path, capsys):
    softmax = tmp_path / "s.nplm"
    make_net("softmax-diag-0", order=3).save(softmax)
    before = softmax.read_bytes()
    assert main(["precompute", str(softmax), "--text", str(bad_text)]) == 1
    _one_clear_error(capsys, f"{bad_text}:2")
    assert softmax.read_bytes() == before
    out = tmp_path / "mix.json"
    assert main(["interpolate", "--model", models["binary"], "--model", models["arpa"], "--tune", str(bad_text),
                 "--out", str(out)]) == 1
    _one_clear_error(capsys, f"{bad_text}:2")
    assert not out.exists()


@pytest.mark.parametrize("content", ["", "\n  \n\n"])
def test_precompute_and_tune_refuse_a_text_without_words(models, tmp_path, capsys, content):
    empty = tmp_path / "empty.txt"
    empty.write_text(content)
    softmax = tmp_path / "s.nplm"
    make_net("softmax-diag-0", order=3).save(softmax)
    before = softmax.read_bytes()
    assert main(["precompute", str(softmax), "--text", str(empty), "--out", str(tmp_path / "p.nplm")]) == 1
    assert f"{empty}: the text has no words" in capsys.readouterr().err
    assert softmax.read_bytes() == before and not (tmp_path / "p.nplm").exists()
    assert main(["interpolate", "--model", models["binary"], "--model", models["arpa"], "--tune", str(empty),
                 "--out", str(tmp_path / "mix.json")]) == 1
    assert f"{empty}: the tuning text has no sentences" in capsys.readouterr().err


# --- output names -----------------------------------------------------------------------


def test_atomic_write_names_the_output_not_its_temporary_file(tmp_path):
    from nplm.io.atomic import atomic_write
    with pytest.raises(FileNotFoundError) as e:
        with atomic_write(tmp_path / "missing" / "out.nplm"):
            pass
    assert e.value.filename == str(tmp_path / "missing") and "nplm-tmp" not in str(e.value)
    with pytest.raises(IsADirectoryError) as e:
        with atomic_write(tmp_path):
            pass
    assert e.value.filename == str(tmp_path) and "nplm-tmp" not in str(e.value)
    assert not list(tmp_path.iterdir()) and not list(tmp_path.parent.glob(".nplm-tmp-*"))


def test_outputs_are_checked_before_the_work(models, tmp_path, capsys):
    missing = tmp_path / "no" / "such"
    text = str(TOY)
    runs = [
        ["build-binary", models["arpa"], "{}"],
        ["estimate", "-o", "2", "--text", text, "--arpa", "{}", "-q"],
        ["estimate", "-o", "2", "--text", text, "--binary", "{}", "-q"],
        ["distil", models["binary"], "--text", text, "--order", "2", "--arpa", "{}", "-q"],
        ["convert", models["binary"], "{}", "--to", "arpa"],
        ["interpolate", "--model", models["binary"], "--model", models["arpa"], "--out", "{}"],
        ["cluster", "--text", text, "-c", "2", "-q", "-o", "{}"],
        ["sample", models["softmax"], "--tokens", "5", "--out", "{}", "-q"],
        ["precompute", models["softmax"], "--text", text, "--out", "{}"],
        ["train", "--train", text, "--out", "{}", "--order", "2", "--embedding-dim", "4", "--hidden", "",
         "--epochs", "1", "--quiet", "--threads", "1"],
    ]
    for args in runs:
        for bad, message in ((missing / "x.out", f"nplm: error: {missing}: No such directory for the output"),
                             (tmp_path, f"nplm: error: {tmp_path}: Is a directory, not a file name for the output")):
            assert main([str(bad) if a == "{}" else a for a in args]) == 1, args
            err = capsys.readouterr().err
            assert message in err and "nplm-tmp" not in err, (args, err)
            assert "epoch" not in err and "n-grams:" not in err and "\n" == err[-1] and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --- numbers in messages, distil --prune-to ---------------------------------------------


@pytest.mark.parametrize("weights, message", [
    (("0.5", "-0.5"), "linear weights must be non-negative, got [0.5, -0.5]"),
    (("0.5", "nan"), "weights must be finite, got [0.5, nan]"),
    (("0.5", "0.6"), "linear weights must sum to 1, got [0.5, 0.6] (sum 1.1)"),
])
def test_weights_in_messages_are_plain_numbers(models, tmp_path, capsys, weights, message):
    args = ["interpolate", "--model", models["binary"], "--model", models["arpa"], "--out", str(tmp_path / "m.json")]
    for w in weights:
        args += ["--weight", w]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert message in err and "np." not in err, err


def test_tune_result_repr_is_plain_numbers():
    from nplm.compose.interpolate import TuneResult
    r = repr(TuneResult(np.array([0.25, 0.75]), 1.0, 2.0, 3, 4))
    assert "weights=[0.25, 0.75]" in r and "np." not in r


@pytest.mark.parametrize("value", ["-5", "0", "1.5", "x"])
def test_distil_prune_to_must_be_positive(models, tmp_path, capsys, value):
    out = tmp_path / "d.arpa"
    with pytest.raises(SystemExit) as e:
        main(["distil", models["binary"], "--text", str(TOY), "--order", "2", "--arpa", str(out), "-q",
              "--prune-to", value])
    assert e.value.code == 2 and f"--prune-to: expected a positive integer, got '{value}'" in capsys.readouterr().err
    assert not out.exists()
    if value in ("-5", "0"):
        from nplm.compose.distil import distil
        with pytest.raises(ValueError, match="prune_to is the number of n-grams"):
            distil(models["binary"], 2, str(TOY), prune_to=int(value))


# --- verify: specs component by component, missing files, altered magic ----------------


def test_verify_checks_each_component_of_a_spec(models, tmp_path):
    """A payload flip in a component is found through the spec (loading the spec maps
    the component without reading it), and a sound spec lists its components."""
    raw = bytearray(Path(models["binary"]).read_bytes())
    bad = tmp_path / "bad.nplm"
    spec = max(container.read(models["binary"])._specs.values(), key=lambda s: s["nbytes"])
    raw[spec["offset"] + spec["nbytes"] // 2] ^= 4       # inside the largest array's payload
    bad.write_bytes(bytes(raw))
    nplm.Model(str(bad), quiet_config())                # loads: only a full read finds it
    good = linear_spec(tmp_path / "good.json", [models["binary"], {"path": models["softmax"], "normalization": "exact"}],
                       [0.5, 0.5])
    damaged = linear_spec(tmp_path / "damaged.json", ["bad.nplm", models["softmax"]], [0.5, 0.5])
    r = run_cli("verify", good, damaged, bad)
    assert "Traceback" not in r.stderr and r.returncode == 1
    line = r.stdout.strip()
    assert line.startswith(f"{good}: interpolation spec (linear, 2 components: ") and line.endswith(": OK")
    assert "kn.nplm [nplm backoff binary" in line and "softmax.nplm [nplm neural binary" in line
    errs = r.stderr.splitlines()
    assert f"{damaged}: DAMAGED: " in errs[0] and "component 1 of 2 (bad.nplm) is damaged" in errs[0] \
        and "checksum mismatch" in errs[0]
    assert errs[1].startswith(f"{bad}: DAMAGED: ") and "checksum mismatch" in errs[1]


def test_verify_says_missing_or_unreadable_not_damaged(models, tmp_path):
    spec = linear_spec(tmp_path / "s.json", ["gone.nplm", models["binary"]], [0.5, 0.5])
    r = run_cli("verify", tmp_path / "nothere.nplm", tmp_path, spec, models["arpa"])
    assert "Traceback" not in r.stderr and r.returncode == 1
    errs = r.stderr.splitlines()
    assert errs[0] == f"{tmp_path / 'nothere.nplm'}: MISSING: no such file"
    assert errs[1].startswith(f"{tmp_path}: UNREADABLE: ") and "directory" in errs[1]
    assert errs[2].startswith(f"{spec}: DAMAGED: ") and "component 1 of 2 (gone.nplm) is missing" in errs[2]
    words = len(nplm.Model(models['arpa'], quiet_config()).vocab)
    assert r.stdout == f"{models['arpa']}: ARPA file, order 3, {words} words: OK\n"


@pytest.mark.parametrize("byte,bit", [(0, 0), (1, 3), (3, 5), (4, 0), (7, 1)])
def test_a_flipped_magic_byte_is_called_a_damaged_nplm_binary(models, tmp_path, byte, bit):
    raw = bytearray(Path(models["binary"]).read_bytes())
    raw[byte] ^= 1 << bit
    bad = tmp_path / "flip.nplm"
    bad.write_bytes(bytes(raw))
    r = run_cli("verify", bad)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"{bad}: DAMAGED: ") and "damaged nplm binary" in r.stderr, r.stderr
    assert "not an ARPA file" not in r.stderr
    with pytest.raises(nplm.ModelLoadError, match="damaged nplm binary"):
        nplm.Model(str(bad), quiet_config())
    r = run_cli("convert", bad, tmp_path / "x.arpa")
    assert r.returncode == 1 and "damaged nplm binary" in r.stderr


def test_binary_garbage_is_not_an_nplm_binary_or_arpa_file(tmp_path):
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4)
    r = run_cli("verify", junk)
    assert r.returncode == 1 and "not an nplm binary or ARPA file" in r.stderr


# --- option values: refused, naming the option ---------------------------------------


@pytest.mark.parametrize("args,message", [
    (["distil", "{binary}", "--text", TOY, "-o", "3", "--arpa", "{tmp}/d.arpa", "--top-k", "-2"],
     "argument --top-k: expected a non-negative integer, got '-2'"),
    (["distil", "{binary}", "--text", TOY, "-o", "3", "--arpa", "{tmp}/d.arpa", "--continuation", "0"],
     "argument --continuation: expected a positive integer, got '0'"),
    (["distil", "{binary}", "--text", TOY, "-o", "3", "--arpa", "{tmp}/d.arpa", "--continuation", "3"],
     "--continuation 3: it reshapes orders below --order 3, so at most 2"),
    (["distil", "{binary}", "--text", TOY, "-o", "1", "--arpa", "{tmp}/d.arpa", "--continuation"],
     "an order-1 table has none"),
    (["train", "--train", TOY, "--valid", TOY, "--out", "{tmp}/n.nplm", "--output", "class", "--classes", "0"],
     "argument --classes: expected a positive integer, got '0'"),
    (["train", "--train", TOY, "--valid", TOY, "--out", "{tmp}/n.nplm", "--seed", "-1"],
     "argument --seed: expected a non-negative integer, got '-1'"),
    (["sample", "{softmax}", "--tokens", "5", "--out", "{tmp}/s.txt", "--seed", "-1"],
     "argument --seed: expected a non-negative integer, got '-1'"),
    (["cluster", "--text", TOY, "-c", "3", "--seed", "-1"],
     "argument --seed: expected a non-negative integer, got '-1'"),
])
def test_bad_option_values_name_the_option(models, tmp_path, args, message):
    args = [str(a).format(tmp=tmp_path, **models) for a in args]
    r = run_cli(*args)
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr
    assert message in r.stderr, r.stderr
    assert not any(tmp_path.iterdir())            # nothing written


def test_convert_of_a_spec_points_to_distil(models, tmp_path):
    """A mixture has no single-file format: convert says so and names `nplm distil`,
    which does turn the spec into an ARPA table."""
    spec = linear_spec(tmp_path / "mix.json", [models["binary"], models["softmax"]], [0.5, 0.5])
    r = run_cli("convert", spec, tmp_path / "o.nplm")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "interpolation spec" in r.stderr and "nplm distil" in r.stderr, r.stderr
    assert not (tmp_path / "o.nplm").exists()
    r = run_cli("distil", spec, "--text", TOY, "--order", "2", "--arpa", tmp_path / "o.arpa", "-q")
    assert r.returncode == 0, r.stderr
    assert nplm.Model(str(tmp_path / "o.arpa"), quiet_config()).order == 2


def test_train_warns_of_options_without_effect_and_checks_the_time_limit(tmp_path, capsys):
    """--classes/--clustering without a class output, --noise-samples without NCE,
    --variable-history at order 2 and --full-history without it change nothing: said, not silently ignored; a time
    limit must be a positive number of minutes (0 read as 'none', -1 stopped at once)."""
    from nplm.cli.main import main
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat\na dog sat on a log\n" * 20)
    base = ["train", "--train", str(text), "--embedding-dim", "8", "--hidden", "", "--epochs", "1",
            "--threads", "1", "--quiet"]
    cases = [(["--output", "softmax", "--classes", "3"], "--classes has no effect without --output class"),
             (["--output", "tree", "--clustering", "frequency"], "--clustering has no effect"),
             (["--output", "softmax", "--objective", "mle", "--noise-samples", "5"],
              "--noise-samples has no effect without --objective nce"),
             (["--order", "2", "--variable-history"], "--variable-history has no effect at order 2"),
             (["--no-variable-history", "--full-history", "0.5"],
              "--full-history has no effect without variable history")]
    for i, (extra, said) in enumerate(cases):
        assert main(base + ["--out", str(tmp_path / f"m{i}.nplm")] + extra) == 0
        assert said in capsys.readouterr().err
    assert main(base + ["--out", str(tmp_path / "ok.nplm"), "--output", "softmax", "--objective", "mle"]) == 0
    assert "warning" not in capsys.readouterr().err
    many = str((os.cpu_count() or 1) + 1)
    assert main(base[:-3] + ["--threads", many, "--quiet", "--out", str(tmp_path / "t.nplm")]) == 0
    assert f"--threads {many} is more than this machine's" in capsys.readouterr().err
    for bad in ("0", "-1", "nan"):
        with pytest.raises(SystemExit):
            main(base + ["--out", str(tmp_path / "x.nplm"), "--time-limit", bad])
        assert "--time-limit: expected a positive number of minutes" in capsys.readouterr().err
    from nplm.neural.train import TrainConfig
    with pytest.raises(ValueError, match="time limit"):
        TrainConfig(time_limit=-60).validate()


def test_missing_input_files_are_named_with_their_option(tmp_path, capsys):
    from nplm.cli.main import main
    text = tmp_path / "t.txt"
    text.write_text("a b\n")
    for argv, option in ((["estimate", "-o", "2", "--text", str(text), "--limit_vocab_file", str(tmp_path / "no")],
                          "--limit_vocab_file"),
                         (["train", "--train", str(text), "--valid", "", "--out", str(tmp_path / "m.nplm")], "--valid"),
                         (["train", "--train", str(tmp_path), "--out", str(tmp_path / "m.nplm")], "--train")):
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err
        assert f"argument {option}" in err and ("no such file" in err or "not a file" in err), err


@pytest.mark.parametrize("command", ["estimate", "distil"])
def test_a_missing_temporary_folder_is_named_with_its_option(models, tmp_path, command):
    missing = tmp_path / "no" / "such" / "dir"
    args = {"estimate": ("estimate", "-o", "3", "--text", TOY, "--arpa", tmp_path / "o.arpa"),
            "distil": ("distil", models["arpa"], "--text", TOY, "-o", "3", "--arpa", tmp_path / "o.arpa")}
    r = run_cli(*args[command], "-T", missing)
    assert r.returncode == 1
    assert f"nplm: error: {missing}: No such directory for temporary files (-T)" in r.stderr
    assert "Errno" not in r.stderr and not (tmp_path / "o.arpa").exists()


def test_kenlm_program_names_after_nplm_run_those_programs(tmp_path, capsys):
    """`nplm lmplz ...` and `nplm build_binary ...` are KenLM's programs with their own
    grammar; `nplm query` stays nplm's own command."""
    from nplm.cli.kenlm import run
    assert main(["build_binary"]) == run("build_binary", [])
    ours = capsys.readouterr().err
    assert "build_binary" in ours and ours.count("\n") > 3      # the same usage text twice
    arpa = tmp_path / "m.arpa"
    text = tmp_path / "t.txt"
    text.write_text("a b c\na b\nb c a\n")
    assert main(["lmplz", "-o", "2", "--discount_fallback", "--text", str(text), "--arpa", str(arpa)]) == 0
    assert arpa.read_text().startswith("\\data\\\nngram 1=6\n")


def test_text_is_positional_or_flag_and_an_empty_one_is_an_error(tmp_path, capsys):
    arpa, text = "examples/toy.arpa", "examples/toy.txt"
    assert main(["query", arpa, text, "-v", "summary"]) == 0
    positional = capsys.readouterr().out
    assert main(["query", arpa, "--text", text, "-v", "summary"]) == 0
    assert capsys.readouterr().out == positional
    assert main(["perplexity", arpa, "--text", text]) == 0
    assert capsys.readouterr().out.splitlines()[0] == positional.splitlines()[0]
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["perplexity", arpa, str(empty)]) == 1
    assert capsys.readouterr().err == f"nplm: error: {empty}: no sentence to score (the text is empty)\n"
    assert main(["perplexity", arpa, text, "--text", text]) == 1
    assert "give the text once" in capsys.readouterr().err


def test_an_output_named_arpa_is_not_overwritten_with_a_binary(tmp_path, capsys):
    out = tmp_path / "model.arpa"
    out.write_text("an ARPA file the user keeps\n")
    args = ["train", "--train", "examples/toy.txt", "--valid", "examples/toy.txt", "--embedding-dim", "4",
            "--epochs", "1", "--quiet", "--out", str(out)]
    assert main(args) == 1
    assert "the name says ARPA" in capsys.readouterr().err
    assert out.read_text() == "an ARPA file the user keeps\n"
    assert main(args + ["--force"]) == 0
    assert out.read_bytes() != b"an ARPA file the user keeps\n"


def test_an_output_that_is_standard_input_is_refused(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("a b c\na b\nb c a\n")
    with open(text, "rb") as stdin:
        r = subprocess.run([sys.executable, "-m", "nplm", "estimate", "-o", "2", "--discount_fallback", "--arpa",
                            str(text)], stdin=stdin, capture_output=True, cwd=ROOT)
    assert r.returncode == 1
    assert r.stderr.decode() == f"nplm: error: refusing to overwrite the input (standard input is {text}) with the output\n"
    assert text.read_text() == "a b c\na b\nb c a\n"
