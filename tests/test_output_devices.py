"""Outputs that are not regular files — a FIFO a reader waits on, a character device
such as /dev/null, a link into /dev such as /dev/stdout — are written in place,
streaming, as KenLM's programs write them; the node stays what it was.  (A private
null device made with mknod stands in for /dev/null, so that a regression could not
replace the machine's own.)"""
import os
import stat
import threading

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


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_fifo_gets_the_whole_output_and_stays_a_fifo(tmp_path, name):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    try:
        assert main(COMMANDS[name](str(fifo))) == 0
    finally:
        if reader.is_alive():           # the command failed before opening it
            with open(fifo, "wb"):
                pass
        reader.join()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got[0] == _expected(tmp_path, name)


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
