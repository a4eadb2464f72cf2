"""'-' on the command line: stdin for inputs read as a stream (ARPA, text; compressed
too), stdout for text outputs, a clear error for binary outputs and for verify; and
text outputs compressed by their extension everywhere."""
import bz2
import gzip
import lzma

import kenlm
import pytest

import nplm

from helpers import REFERENCE, ROOT, need_shared, run_cli

SENTENCES = ["the cat sat on the mat", "a dog", "the the the", "zzz unknown words here"]
COMPRESS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}
DECOMPRESS = {".gz": gzip.decompress, ".bz2": bz2.decompress, ".xz": lzma.decompress}


def cli(*args, stdin=b"", cwd=ROOT):
    return run_cli(*args, stdin=stdin, cwd=cwd, text=False)


def ok(r):
    assert r.returncode == 0, r.stderr.decode()
    return r


def refused(r, *words):
    err = r.stderr.decode()
    assert r.returncode != 0 and "Traceback" not in err and err.startswith("nplm: error:"), err
    for w in words:
        assert w in err, err
    return err


def _kenlm(path):
    c = kenlm.Config()
    c.show_progress = False
    return kenlm.Model(str(path), c)


@pytest.fixture(scope="module")
def arpa(tmp_path_factory):
    need_shared()
    d = tmp_path_factory.mktemp("stdio")
    path = d / "tiny.arpa"
    path.write_bytes(lzma.decompress((REFERENCE / "tiny200.o4.discount-fallback.arpa.xz").read_bytes()))
    return path


@pytest.fixture(scope="module")
def neural(tmp_path_factory):
    d = tmp_path_factory.mktemp("stdio_neural")
    text = d / "t.txt"
    text.write_text("".join(f"{s}\n" for s in SENTENCES * 50))
    out = d / "n.nplm"
    ok(cli("train", "--train", text, "--out", out, "--order", 3, "--embedding-dim", 8, "--epochs", 1,
           "--quiet", "--output", "softmax", "--objective", "mle"))
    return text, out


def _same_scores(binary, arpa):
    m, k = nplm.Model(str(binary)), _kenlm(arpa)
    for s in SENTENCES:
        assert m.score(s) == pytest.approx(k.score(s), abs=1e-4)


@pytest.mark.parametrize("ext", ["", ".gz", ".bz2", ".xz"])
@pytest.mark.parametrize("command", ["build-binary", "convert"])
def test_arpa_from_stdin(arpa, tmp_path, ext, command):
    data = arpa.read_bytes()
    out = tmp_path / "o.nplm"
    ok(cli(command, "-", out, stdin=COMPRESS[ext](data) if ext else data))
    _same_scores(out, arpa)


def test_convert_to_stdout(arpa, tmp_path):
    binary = tmp_path / "b.nplm"
    ok(cli("build-binary", arpa, binary))
    back = tmp_path / "back.arpa"
    back.write_bytes(ok(cli("convert", binary, "-", cwd=tmp_path)).stdout)     # binary -> ARPA on stdout
    _same_scores(binary, back)
    piped = ok(cli("convert", "-", "-", "--to", "arpa", stdin=gzip.compress(arpa.read_bytes()))).stdout
    ok(cli("convert", arpa, tmp_path / "x.arpa"))
    assert piped == (tmp_path / "x.arpa").read_bytes()


def test_binary_outputs_refuse_stdout(arpa, tmp_path, neural):
    text, model = neural
    for args in (("build-binary", arpa, "-"), ("convert", arpa, "-"), ("convert", model, "-"),
                 ("estimate", "-o", 2, "--text", text, "--binary", "-", "-q")):
        refused(cli(*args, cwd=tmp_path), "stdout" if args[0] != "convert" or args[1] == arpa else "neural")
        assert not (tmp_path / "-").exists()
    with pytest.raises(ValueError, match="stdout"):
        nplm.backoff.kneser_ney.estimate(str(text), 2, binary="-", progress=False)


def test_verify_stdin_is_a_clear_error(arpa, tmp_path):
    binary = tmp_path / "b.nplm"
    ok(cli("build-binary", arpa, binary))
    r = cli("verify", "-", stdin=binary.read_bytes())
    err = r.stderr.decode()
    assert r.returncode == 1 and "file name" in err and "DAMAGED" not in err and "Traceback" not in err


def test_distil_and_estimate_arpa_to_stdout(arpa, tmp_path, neural):
    text, _ = neural
    ok(cli("distil", arpa, "--text", text, "-o", 2, "--arpa", tmp_path / "d.arpa", "-q", cwd=tmp_path))
    out = ok(cli("distil", arpa, "--text", text, "-o", 2, "--arpa", "-", "-q", cwd=tmp_path)).stdout
    assert out == (tmp_path / "d.arpa").read_bytes() and not (tmp_path / "-").exists()
    ok(cli("estimate", "-o", 2, "--text", text, "--arpa", tmp_path / "e.arpa", "-q", "--discount_fallback"))
    out = ok(cli("estimate", "-o", 2, "--arpa", "-", "-q", "--discount_fallback",
                 stdin=gzip.compress(text.read_bytes()))).stdout
    assert out == (tmp_path / "e.arpa").read_bytes()


@pytest.mark.parametrize("ext", [".gz", ".bz2", ".xz"])
def test_sample_out_stdout_and_compressed(neural, tmp_path, ext):
    _, model = neural
    plain = tmp_path / "s.txt"
    ok(cli("sample", model, "--tokens", 200, "--out", plain, "-q"))
    assert plain.read_bytes().count(b"\n") >= 5
    out = ok(cli("sample", model, "--tokens", 200, "--out", "-", "-q", cwd=tmp_path)).stdout
    assert out == plain.read_bytes() and not (tmp_path / "-").exists()
    packed = tmp_path / f"s.txt{ext}"
    ok(cli("sample", model, "--tokens", 200, "--out", packed, "-q"))
    assert DECOMPRESS[ext](packed.read_bytes()) == plain.read_bytes()


@pytest.mark.parametrize("ext", [".gz", ".bz2", ".xz"])
def test_cluster_output_compressed_by_extension(neural, tmp_path, ext):
    text, _ = neural
    plain = tmp_path / "cl.tsv"
    ok(cli("cluster", "--text", text, "-c", 3, "-o", plain, "-q"))
    assert plain.read_text().count("\n") > 5
    packed = tmp_path / f"cl.tsv{ext}"
    ok(cli("cluster", "--text", text, "-c", 3, "-o", packed, "-q"))
    assert DECOMPRESS[ext](packed.read_bytes()) == plain.read_bytes()
    assert ok(cli("cluster", "--text", text, "-c", 3, "-q")).stdout == plain.read_bytes()


@pytest.mark.parametrize("ext", ["", ".gz", ".bz2", ".xz"])
def test_text_from_a_pipe(arpa, tmp_path, ext):
    """--text <(zcat t.gz) or a FIFO: a file that cannot seek back after its magic bytes
    were read ("File or stream is not seekable" before), compressed or not."""
    import os
    import threading
    fifo = tmp_path / "text.fifo"
    os.mkfifo(fifo)
    data = "".join(f"{s}\n" for s in SENTENCES).encode()
    plain = tmp_path / "t.txt"
    plain.write_bytes(data)

    def feed():
        with open(fifo, "wb") as f:
            f.write(COMPRESS[ext](data) if ext else data)
    writer = threading.Thread(target=feed)
    writer.start()
    try:
        got = ok(cli("perplexity", arpa, fifo)).stdout
    finally:
        writer.join(timeout=60)
    assert got == ok(cli("perplexity", arpa, plain)).stdout


@pytest.mark.parametrize("argv", [["query", "{arpa}", "--text", "{missing}"], ["perplexity", "{arpa}", "{missing}"],
                                  ["estimate", "-o", "2", "--text", "{missing}"]])
def test_missing_text_is_named_before_the_model_loads(arpa, tmp_path, argv):
    r = cli(*[a.format(arpa=arpa, missing=tmp_path / "no.txt") for a in argv])
    err = r.stderr.decode()
    assert r.returncode == 2 and "no such file" in err and "Loading the LM" not in err and "===" not in err, err
