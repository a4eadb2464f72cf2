"""No command overwrites its own input, whatever names the same file (the name
itself, a symbolic link or a hard link).  ``nplm cluster --text t -o t`` and
``nplm interpolate --tune dev --out dev`` replaced their input with their output;
every writing command now declares its inputs and the CLI checks each output
against them before any work."""
import os

import pytest
from _bounded import ROOT

from helpers import make_net, run_cli

TOY_ARPA = ROOT / "examples" / "toy.arpa"
TOY_TEXT = ROOT / "examples" / "toy.txt"


def cli(*args, cwd):
    return run_cli(*args, cwd=cwd, timeout=300)


@pytest.fixture
def files(tmp_path):
    text = tmp_path / "t.txt"
    text.write_bytes(TOY_TEXT.read_bytes())
    arpa = tmp_path / "m.arpa"
    arpa.write_bytes(TOY_ARPA.read_bytes())
    neural = tmp_path / "n.nplm"
    make_net("softmax-full-2").save(str(neural))
    return {"text": text, "arpa": arpa, "neural": neural}


def _alias(path, how):
    """A name for ``path``: itself, a symbolic link or a hard link to it."""
    if how == "same":
        return path
    alias = path.with_name("alias-" + how + path.suffix)
    (os.symlink if how == "symlink" else os.link)(path.name if how == "symlink" else path, alias)
    return alias


# (input key, the command with {IN} for that input and {OUT} for the output)
COMMANDS = {
    "cluster": ("text", ["cluster", "--text", "{IN}", "-c", "3", "-o", "{OUT}", "-q"]),
    "interpolate --tune": ("text", ["interpolate", "--model", "{arpa}", "--model", "{arpa}",
                                    "--tune", "{IN}", "--out", "{OUT}"]),
    "interpolate --model": ("arpa", ["interpolate", "--model", "{IN}", "--model", "{arpa}", "--out", "{OUT}"]),
    "build-binary": ("arpa", ["build-binary", "{IN}", "{OUT}"]),
    "estimate": ("text", ["estimate", "-o", "2", "--text", "{IN}", "--arpa", "{OUT}", "--discount_fallback",
                          "-q"]),
    "distil": ("text", ["distil", "{arpa}", "--text", "{IN}", "--order", "2", "--arpa", "{OUT}"]),
    "convert": ("arpa", ["convert", "{IN}", "{OUT}"]),
    "sample": ("neural", ["sample", "{IN}", "--tokens", "20", "--out", "{OUT}", "-q"]),
}


CASES = [(name, "same") for name in sorted(COMMANDS)] + [
    (name, how) for name in ("cluster", "interpolate --tune", "build-binary") for how in ("symlink", "hardlink")]


@pytest.mark.parametrize("name,how", CASES)
def test_a_command_never_overwrites_its_input(files, tmp_path, name, how):
    key, argv = COMMANDS[name]
    src = files[key]
    before = src.read_bytes()
    out = _alias(src, how)
    args = [a.format(IN=src, OUT=out, arpa=files["arpa"]) for a in argv]
    r = cli(*args, cwd=tmp_path)
    assert r.returncode != 0, f"{name} wrote over its input: {r.stderr}"
    assert "refusing to overwrite" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert src.read_bytes() == before
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".nplm-tmp-")]


def test_a_different_output_is_written(files, tmp_path):
    out = tmp_path / "classes.txt"
    r = cli("cluster", "--text", files["text"], "-c", "3", "-o", out, "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert out.read_text().count("\n") > 3
