"""The PyTorch training engine (``nplm train --engine torch``): the file it writes is
nplm's, scored by every query path exactly as the torch module's forward pass scores
it, loadable with no torch installed; a real 2-process DistributedDataParallel run
(gloo, CPU) against a 1-process run of the same global minibatch; a run killed
mid-epoch resumes to the very model an uninterrupted run writes; refusals."""
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import nplm

torch = pytest.importorskip("torch", reason="the torch engine needs PyTorch (pip install 'nplm[torch]')")

from nplm.neural.network import NeuralConfig, NeuralNet  # noqa: E402
from nplm.neural.torch_engine import TorchNet, train_torch  # noqa: E402
from nplm.neural.train import TrainConfig  # noqa: E402

from helpers import DATA, ROOT, need_shared  # noqa: E402


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    need_shared()
    d = tmp_path_factory.mktemp("torch")
    lines = (DATA / "ptb" / "ptb.train.txt").read_text().splitlines()
    (d / "a.txt").write_text("\n".join(lines[:1200]) + "\n")
    import gzip
    with gzip.open(d / "b.txt.gz", "wt") as f:                    # a second, compressed shard
        f.write("\n".join(lines[1200:2000]) + "\n")
    (d / "valid.txt").write_text("\n".join((DATA / "ptb" / "ptb.valid.txt").read_text().splitlines()[:200]) + "\n")
    return d


def _cli(*args, check=True, env=None, **kw):
    r = subprocess.run([sys.executable, "-m", "nplm", "train", "--engine", "torch", *map(str, args)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600, env=env, **kw)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    return r


SMALL = dict(order=3, embedding_dim=16, hidden=(24,), context="full")


@pytest.mark.parametrize("config", [
    dict(SMALL, output="softmax", objective="mle"),
    dict(SMALL, output="softmax", objective="nce", noise_samples=5),
    dict(order=4, embedding_dim=20, output="class", objective="mle", classes=12, context="diagonal"),
], ids=["softmax-mle", "softmax-nce", "class-diagonal"])
def test_nplm_scores_as_the_torch_forward_pass(texts, tmp_path, config):
    out = tmp_path / "m.nplm"
    net = train_torch([texts / "a.txt", texts / "b.txt.gz"], texts / "valid.txt", out, NeuralConfig(**config),
                      TrainConfig(epochs=1, minibatch=32, threads=1), log=lambda s: None)
    model = nplm.Model(str(out))
    module = TorchNet(NeuralNet.load(str(out))).eval()
    sentences = (texts / "valid.txt").read_text().splitlines()[:40]
    vocab = net.vocab
    m = net.config.order - 1
    with torch.no_grad():
        for sentence in sentences:
            words = sentence.split()
            ids = [vocab.index.get(w, 0) for w in words] + [2]
            ctx = [3] * (m - 1) + [1]
            theirs = []
            for w in ids:
                lp = module.log_probs(module.hidden(torch.tensor([ctx])))[0, w]
                theirs.append(float(lp) / math.log(10))
                ctx = ctx[1:] + [w]
            ours = [p for p, _, _ in model.full_scores(sentence)]
            assert np.max(np.abs(np.array(ours) - np.array(theirs))) <= 1e-5
    assert abs(sum(10 ** np.asarray(model.log10_distribution(model_state(model)), np.float64)) - 1) < 1e-4


def model_state(model):
    s = nplm.State()
    model.BeginSentenceWrite(s)
    return s


BLOCK_TORCH = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked")
sys.meta_path.insert(0, Block())
import nplm
m = nplm.Model(sys.argv[1])
print(m.score("the company said"), m.perplexity("the company said"))
assert "torch" not in sys.modules
"""


def test_the_file_loads_without_torch(texts, tmp_path):
    out = tmp_path / "m.nplm"
    _cli("--train", texts / "a.txt", "--valid", texts / "valid.txt", "--out", out, "--order", 3,
         "--embedding-dim", 16, "--output", "softmax", "--objective", "mle", "--epochs", 1, "--minibatch", 32,
         "--threads", 1, "-q")
    r = subprocess.run([sys.executable, "-c", BLOCK_TORCH, str(out)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert float(r.stdout.split()[0]) == pytest.approx(nplm.Model(str(out)).score("the company said"))


def _history(path):
    return NeuralNet.load(str(path), return_container=True)[1].config["training"]["history"]


def test_two_processes_of_distributed_data_parallel(texts, tmp_path):
    """torchrun --nproc_per_node 2 (gloo on the CPU) with global minibatch 32 against one
    process with 32: the same loss curve within tolerance, a model that loads and
    scores, and validation perplexities within 10%."""
    args = ["--train", texts / "a.txt", texts / "b.txt.gz", "--valid", texts / "valid.txt", "--order", 3,
            "--embedding-dim", 16, "--hidden", "24", "--context", "full", "--output", "softmax", "--objective",
            "mle", "--epochs", 2, "--minibatch", 32, "--threads", 1, "--dropout", 0, "--input-dropout", 0,
            "--no-variable-history", "-q"]
    one, two = tmp_path / "one.nplm", tmp_path / "two.nplm"
    _cli(*args, "--out", one)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        "-m", "nplm", "train", "--engine", "torch", *map(str, args), "--out", str(two)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    h1, h2 = _history(one), _history(two)
    assert len(h1) == len(h2) == 2
    for a, b in zip(h1, h2):
        assert abs(a["loss"] - b["loss"]) < 0.05 * a["loss"]
        assert abs(a["valid_ppl"] - b["valid_ppl"]) < 0.1 * a["valid_ppl"]
    training = NeuralNet.load(str(two), return_container=True)[1].config["training"]
    assert training["processes"] == 2 and training["engine"] == "torch"
    assert math.isfinite(nplm.Model(str(two)).perplexity("the company said it expects"))


def test_a_run_killed_mid_epoch_resumes_to_the_same_model(texts, tmp_path):
    args = ["--train", texts / "a.txt", "--valid", texts / "valid.txt", "--order", 3, "--embedding-dim", 16,
            "--output", "softmax", "--objective", "nce", "--noise-samples", 5, "--epochs", 2, "--minibatch", 64,
            "--threads", 1, "-q", "--checkpoint-every", "0.0001"]
    whole, parts = tmp_path / "whole.nplm", tmp_path / "parts.nplm"
    _cli(*args, "--out", whole)
    p = subprocess.Popen([sys.executable, "-m", "nplm", "train", "--engine", "torch", *map(str, args),
                          "--out", str(parts)], cwd=ROOT, stderr=subprocess.PIPE)
    ckpt = tmp_path / "parts.nplm.torch.ckpt"
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        if ckpt.exists():
            state = torch.load(ckpt, weights_only=False)
            if state["run"]["epoch"] == 1 and state["run"]["batch"] > 5:
                break
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not parts.exists()
    _cli(*args, "--out", parts, "--resume")
    a, b = NeuralNet.load(str(whole)), NeuralNet.load(str(parts))
    for name in a.params:
        assert np.array_equal(np.asarray(a.params[name]), np.asarray(b.params[name])), name


@pytest.mark.parametrize("extra, message", [
    (["--output", "tree"], "not --output tree"),
    (["--shortlist", "50"], "--shortlist"),
    (["--output", "class", "--objective", "nce"], "--objective mle"),
    (["--device", "cuda"] if not torch.cuda.is_available() else ["--ensemble", "2"], "cuda|--ensemble"),
], ids=["tree", "shortlist", "class-nce", "device"])
def test_refusals_name_the_option(texts, tmp_path, extra, message):
    r = _cli("--train", texts / "a.txt", "--out", tmp_path / "m.nplm", "--epochs", 1, *extra, check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert any(m in r.stderr for m in message.split("|")), r.stderr


def test_the_cython_engine_takes_one_text(texts, tmp_path):
    r = subprocess.run([sys.executable, "-m", "nplm", "train", "--train", str(texts / "a.txt"),
                        str(texts / "b.txt.gz"), "--out", str(tmp_path / "m.nplm")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and "--engine torch" in r.stderr
