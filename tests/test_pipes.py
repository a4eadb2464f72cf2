"""Models read from pipes, /dev/stdin and process substitution, as kenlm reads them.

Format detection opened the path several times (is it a binary? a spec? what do
its header counts need?), and each open of a pipe consumed what it read: the ARPA
reader then saw the middle of the file ("first non-empty line was '154'").  Now
``nplm.io.files.sniff`` opens the file once and every reader reads that stream.
"""
import gzip
import os
import subprocess
import sys
import threading

import pytest
from _bounded import ROOT

import nplm

TOY_ARPA = ROOT / "examples" / "toy.arpa"
SENTENCES = ["the dog saw a cat", "a cat", "w1 the dog"]


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT))


def _scores(path_expr, data):
    """Scores of SENTENCES by nplm.Model(path_expr) in a child reading ``data`` from
    a pipe on its stdin."""
    code = ("import nplm, sys\n"
            "cfg = nplm.Config(); cfg.show_progress = False; cfg.arpa_complain = nplm.ARPALoadComplain.NONE\n"
            f"m = nplm.Model({path_expr!r}, cfg)\n"
            f"print(' '.join(repr(m.score(s)) for s in {SENTENCES!r}))\n")
    r = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, cwd=ROOT, env=_env(),
                       timeout=120)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def _feed(pipe, data):
    try:
        pipe.write(data)
        pipe.close()
    except BrokenPipeError:
        pass


@pytest.fixture(scope="module")
def expected():
    m = nplm.Model(str(TOY_ARPA))
    return [m.score(s) for s in SENTENCES]


@pytest.mark.parametrize("compress", [False, True])
def test_model_from_dev_stdin_pipe(expected, compress):
    data = TOY_ARPA.read_bytes()
    if compress:
        data = gzip.compress(data)
    code, out, err = _scores("/dev/stdin", data)
    assert code == 0, err
    assert [float(x) for x in out.split()] == pytest.approx(expected, abs=1e-5)


def test_an_nplm_binary_through_a_pipe_is_a_clear_error(tmp_path):
    binary = tmp_path / "toy.nplm"
    nplm.build_binary(str(TOY_ARPA), str(binary))
    code, out, err = _scores("/dev/stdin", binary.read_bytes())
    assert code != 0 and "not a pipe" in err, err


def _cli_with_fd(args, data):
    """Run ``nplm ARGS`` with /dev/fd/N (a pipe fed ``data``) for {FD} in ARGS."""
    r, w = os.pipe()
    try:
        argv = [a.replace("{FD}", f"/dev/fd/{r}") for a in args]
        p = subprocess.Popen([sys.executable, "-m", "nplm", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, pass_fds=(r,), cwd=ROOT, env=_env())
    finally:
        os.close(r)
    feeder = threading.Thread(target=_feed, args=(os.fdopen(w, "wb"), data))
    feeder.start()
    out, err = p.communicate("\n".join(SENTENCES).encode() + b"\n", timeout=120)
    feeder.join()
    return p.returncode, out.decode(), err.decode()


def test_cli_query_reads_a_process_substitution(expected):
    code, out, err = _cli_with_fd(["query", "{FD}", "-v", "sentence"], TOY_ARPA.read_bytes())
    assert code == 0, err
    totals = [float(line.split("Total: ")[1].split()[0]) for line in out.splitlines() if "Total: " in line]
    assert totals == pytest.approx(expected, abs=1e-4)


def test_build_binary_from_a_pipe(tmp_path, expected):
    out_path = tmp_path / "piped.nplm"
    code, out, err = _cli_with_fd(["build-binary", "{FD}", str(out_path)], gzip.compress(TOY_ARPA.read_bytes()))
    assert code == 0, err
    m = nplm.Model(str(out_path))
    assert [m.score(s) for s in SENTENCES] == pytest.approx(expected, abs=1e-5)


def test_sniff_replays_what_it_read():
    from nplm.io.files import SNIFF_BYTES, sniff
    data = b"x" * (3 * SNIFF_BYTES + 17) + b"\n"
    r, w = os.pipe()
    feeder = threading.Thread(target=_feed, args=(os.fdopen(w, "wb"), data))
    feeder.start()
    kind, stream = sniff(f"/dev/fd/{r}")
    with stream:
        assert kind == "arpa"
        assert stream.read() == data
    feeder.join()
    os.close(r)
