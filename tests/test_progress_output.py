"""What commands write on stderr: progress bars only on a terminal (a pipe or a log
gets none of their carriage-return updates), -q/--quiet and --verbose on every command,
and the end of training: the saved model, its validation perplexity, the checkpoint
removed, --time-limit honoured within an epoch."""
import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "examples" / "toy.txt"


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("TQDM_DISABLE", None)
    return env


def run_piped(*args):
    """``nplm ARGS 2> pipe``: (exit code, stderr)."""
    r = subprocess.run([sys.executable, "-m", "nplm", *map(str, args)], cwd=ROOT, env=_env(),
                       capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    return r.returncode, r.stderr


def run_on_terminal(*args):
    """``nplm ARGS`` with stderr on a pseudo-terminal: (exit code, what the terminal got)."""
    master, slave = pty.openpty()
    # a terminal 100 columns wide (a new pseudo-terminal has 0, where tqdm draws nothing)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    p = subprocess.Popen([sys.executable, "-m", "nplm", *map(str, args)], cwd=ROOT, env=_env(),
                         stdout=subprocess.DEVNULL, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    got = b""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:          # the child closed its end
                break
            if not chunk:
                break
            got += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    return p.wait(timeout=60), got.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A text whose epoch takes long enough for a time limit to land inside it."""
    import numpy as np
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(400)]
    p = 1.0 / np.arange(1, 401)
    p /= p.sum()
    lines = [" ".join(rng.choice(words, size=rng.integers(5, 20), p=p)) for _ in range(30000)]
    path = tmp_path_factory.mktemp("progress") / "text.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def train_args(text, out, *extra):
    return ["train", "--train", text, "--valid", text, "--order", "3", "--embedding-dim", "8",
            "--threads", "1", "--out", out, *extra]


def test_training_into_a_pipe_writes_no_progress_lines(tmp_path):
    out = tmp_path / "m.nplm"
    code, err = run_piped(*train_args(TOY, out, "--epochs", "2"))
    assert code == 0, err
    assert "\r" not in err
    assert "epoch 1:" in err and "epoch 2:" in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"saved {out}; validation perplexity "), last
    float(last.rsplit(" ", 1)[1])
    assert out.exists() and not Path(str(out) + ".ckpt").exists()


def test_keep_checkpoint_keeps_it(tmp_path):
    out = tmp_path / "m.nplm"
    code, err = run_piped(*train_args(TOY, out, "--epochs", "1", "--keep-checkpoint"))
    assert code == 0, err
    assert Path(str(out) + ".ckpt").exists()


def test_training_on_a_terminal_shows_one_bar(tmp_path):
    out = tmp_path / "m.nplm"
    code, screen = run_on_terminal(*train_args(TOY, out, "--epochs", "1"))
    assert code == 0, screen
    assert "\r" in screen
    bar_frames = [f for f in screen.replace("\n", "\r").split("\r") if "ex/s" in f or "ex [" in f]
    assert bar_frames, screen
    assert all(f.lstrip().startswith("epoch 1") for f in bar_frames), bar_frames
    # one speed a frame: tqdm's own rate, no second examples/s in the postfix
    assert all(f.count("/s") <= 1 for f in bar_frames), bar_frames
    assert f"saved {out}" in screen


def test_quiet_on_a_terminal_draws_no_bar(tmp_path):
    code, screen = run_on_terminal(*train_args(TOY, tmp_path / "m.nplm", "--epochs", "1", "--quiet"))
    assert code == 0, screen
    assert "\r\r" not in screen and "ex/s" not in screen


def test_time_limit_stops_within_an_epoch(tmp_path, corpus):
    out = tmp_path / "m.nplm"
    # 0.002 minutes: far less than one epoch of this text through a hidden layer
    valid = tmp_path / "valid.txt"
    valid.write_text("".join(corpus.read_text().splitlines(keepends=True)[:200]))
    code, err = run_piped("train", "--train", corpus, "--valid", valid, "--order", "4", "--embedding-dim", "32",
                          "--context", "full", "--hidden", "128", "--output", "softmax", "--threads", "1",
                          "--epochs", "50", "--time-limit", "0.002", "--out", out)
    assert code == 0, err
    epochs = [line for line in err.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 1, err
    assert "time limit: stopped after" in epochs[0]
    assert "stopping: time limit reached" in err
    assert out.exists() and not Path(str(out) + ".ckpt").exists()


def test_estimate_into_a_pipe_keeps_banners_without_bars(tmp_path):
    code, err = run_piped("estimate", "-o", "3", "--text", TOY, "--arpa", tmp_path / "t.arpa")
    assert code == 0, err
    assert "=== 1/5 Counting" in err and "Statistics:" in err
    assert "\r" not in err and "*" * 20 not in err


def test_estimate_on_a_terminal_draws_tqdm_bars(tmp_path, corpus):
    code, screen = run_on_terminal("estimate", "-o", "3", "--discount_fallback", "--text", corpus,
                                   "--arpa", tmp_path / "t.arpa")
    assert code == 0, screen
    assert "=== 1/5 Counting" in screen and "\r" in screen and "*" * 20 not in screen


def test_distil_into_a_pipe_loads_its_models_silently(tmp_path):
    """The table distil checks after writing it loads without a bar or kenlm's
    advice to build a binary: the command's report is the only word of it."""
    arpa, out = tmp_path / "kn.arpa", tmp_path / "d.arpa"
    assert run_piped("estimate", "-o", "3", "--text", TOY, "--arpa", arpa, "-q")[0] == 0
    code, err = run_piped("distil", arpa, "--text", TOY, "--order", "3", "--arpa", out, "--valid", TOY)
    assert code == 0, err
    assert "validation perplexity" in err
    assert "\r" not in err and "Loading the LM" not in err, err


def test_every_command_takes_quiet_and_verbose():
    from nplm.cli.main import build_parser
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert len(commands) >= 12
    for name, sub in commands.items():
        options = {o for a in sub._actions for o in a.option_strings}
        assert {"--quiet", "--verbose"} <= options, name
