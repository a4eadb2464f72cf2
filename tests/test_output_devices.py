"""Outputs that are not regular files — a FIFO a reader waits on, a character device
such as /dev/null, a link into /dev such as /dev/stdout — are written in place,
streaming, as KenLM's programs write them; the node stays what it was.  (A private
null device made with mknod stands in for /dev/null, so that a regression could not
replace the machine's own.)"""
import os
import select
import stat
import threading
import time

import pytest

from nplm.cli.main import main

from helpers import ROOT

TEXT = str(ROOT / "examples" / "toy.txt")
ARPA = str(ROOT / "examples" / "toy.arpa")
COMMANDS = {
    "estimate --arpa": lambda out: ["estimate", "-o", "3", "--text", TEXT, "--arpa", out, "--quiet"],
    "build-binary probing": lambda out: ["build-binary", "probing", ARPA, out],
    "build-binary trie": lambda out: ["build-binary", "trie", ARPA, out],
    "build-binary nplm": lambda out: ["build-binary", "nplm", ARPA, out],
    "convert": lambda out: ["convert", ARPA, out, "--to", "arpa"],
    "estimate --binary": lambda out: ["estimate", "-o", "3", "--text", TEXT, "--binary", out, "--quiet"],
    "count": lambda out: ["count", "-o", "3", "--text", TEXT, "--output", out, "--quiet"],
    "cluster": lambda out: ["cluster", "--text", TEXT, "-c", "3", "-o", out, "--quiet"],
}


def _expected(tmp_path, name):
    out = tmp_path / "regular.out"
    assert main(COMMANDS[name](str(out))) == 0
    return out.read_bytes()


def _read_fifo_while(fifo, command, deadline_s=120):
    """What ``command`` writes to ``fifo``, read until it has returned and the FIFO's
    last writer has closed it: (exit code, bytes).  The read end is opened first,
    without blocking, so the command's open never waits for a reader; a command that
    outlives the deadline, or leaves the write end open after returning, fails the
    test instead of hanging it."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    result = []
    writer = threading.Thread(target=lambda: result.append(command()), daemon=True)
    writer.start()
    chunks, stop = [], time.monotonic() + deadline_s
    try:
        while True:
            assert time.monotonic() < stop, "the command still runs, or holds the FIFO open, after %d s" % deadline_s
            done = not writer.is_alive()    # before the read: then it sees every write
            select.select([fd], [], [], 0.05)
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:         # a writer has it open, nothing to read yet
                continue
            if chunk:
                chunks.append(chunk)
            elif done:                      # no writer left, and the command had returned
                break
            else:                           # no writer yet (or between two opens)
                time.sleep(0.01)
    finally:
        os.close(fd)
    writer.join(1)
    return result[0], b"".join(chunks)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_fifo_gets_the_whole_output_and_stays_a_fifo(tmp_path, name):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    code, got = _read_fifo_while(fifo, lambda: main(COMMANDS[name](str(fifo))))
    assert code == 0
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got == _expected(tmp_path, name)


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a character device needs root (CI runs as root)")
@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_character_device_stays_a_device(tmp_path, name):
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    assert main(COMMANDS[name](str(null))) == 0
    assert stat.S_ISCHR(os.stat(null).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["null"]        # no temporary file left beside it


def test_a_full_device_is_a_clear_error(capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    assert main(["estimate", "-o", "3", "--text", TEXT, "--arpa", "/dev/full", "--quiet"]) == 1
    assert capsys.readouterr().err == "nplm: error: /dev/full: No space left on device\n"
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)
