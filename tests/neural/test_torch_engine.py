"""The torch training engine (nplm train --engine torch): its models score in nplm as
its own forward pass does, load without torch, train the same in two processes as in
one, resume within an epoch, and refuse what it does not support by name."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch engine needs PyTorch (pip install 'nplm[torch]')")

import nplm  # noqa: E402
from nplm.cli.main import main  # noqa: E402
from nplm.io import container  # noqa: E402
from nplm.neural import torch_engine as te  # noqa: E402
from nplm.neural.network import PARAM_NAMES, NeuralConfig, NeuralNet  # noqa: E402
from nplm.neural.train import TrainConfig  # noqa: E402
from nplm.neural.vocab import examples, read_sentences  # noqa: E402

from helpers import markov_text  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("torch-data")
    return markov_text(d / "train.txt", 300, 1), markov_text(d / "valid.txt", 40, 2)


KINDS = {
    "softmax-nce-full-2": NeuralConfig(order=4, embedding_dim=8, hidden=(12, 10), context="full", output="softmax",
                                       objective="nce", noise_samples=5),
    "class-nce-diagonal": NeuralConfig(order=3, embedding_dim=8, output="class", classes=5, clustering="brown"),
    "class-mle-tanh": NeuralConfig(order=3, embedding_dim=8, hidden=(8,), output="class", classes=4,
                                   objective="mle", activation="tanh", clustering="frequency"),
    "tree-mle": NeuralConfig(order=3, embedding_dim=8, hidden=(8,), context="full", output="tree"),
    "softmax-mle-shortlist": NeuralConfig(order=3, embedding_dim=8, output="softmax", objective="mle",
                                          shortlist=20, shortlist_input=True),
}


def _train(data, out, config, **tc):
    tc = TrainConfig(**{"epochs": 1, "minibatch": 16, "threads": 1, **tc})
    return te.train([data[0]], data[1], str(out), config, tc, progress=False, log=lambda s: None)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_scores_in_nplm_match_the_torch_forward_pass(data, tmp_path, kind):
    path = tmp_path / "m.nplm"
    _train(data, path, KINDS[kind])
    net = NeuralNet.load(str(path))
    sents = read_sentences(data[1])
    ctx, tgt = examples(sents, net.vocab, net.order)
    S = te.tn.TorchNet(net)
    units = torch.from_numpy(net.unit_ids(tgt).astype(np.int64))
    rows = torch.from_numpy(net.input_ids(ctx).astype(np.int64))
    ours = S(rows, units).double().numpy()
    if net.shortlist is not None:
        ours = ours + net.shortlist.log_ratio[tgt]
    ours = ours * te.LOG10E
    model = nplm.Model(str(path))
    theirs = np.array([s[0] for line in open(data[1]) for s in model.full_scores(line.strip())])
    assert theirs.shape == ours.shape
    assert np.max(np.abs(theirs - ours)) <= 1e-5
    assert np.max(np.abs(net.log10_prob(ctx, tgt) - ours)) <= 1e-5


BLOCK_TORCH = """
import sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is not installed here")
sys.meta_path.insert(0, _NoTorch())
"""


def _python(code, timeout=60):
    env = dict(os.environ, PYTHONPATH=ROOT, OPENBLAS_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_model_file_loads_and_scores_without_torch(data, tmp_path):
    path = str(tmp_path / "m.nplm")
    _train(data, path, KINDS["softmax-nce-full-2"])
    sent = open(data[1]).readline().strip()
    want = [s[0] for s in nplm.Model(path).full_scores(sent)]
    r = _python(BLOCK_TORCH + f"""
import json, nplm
got = [s[0] for s in nplm.Model({path!r}).full_scores({sent!r})]
assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules)
print(json.dumps(got))
""")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == want
    # and the command says what is missing
    r = _python(BLOCK_TORCH + f"""
from nplm.cli.main import main
sys.exit(main(["train", "--engine", "torch", "--train", {data[0]!r}, "--out", {path + "2"!r}]))
""")
    assert r.returncode == 1
    assert "--engine torch needs PyTorch" in r.stderr and "nplm[torch]" in r.stderr


def _history(path):
    return container.read(path).config["training"]


COMMON = ["--order", "3", "--embedding-dim", "8", "--hidden", "8", "--context", "full", "--output", "softmax",
          "--objective", "nce", "--noise-samples", "5", "--epochs", "2", "--minibatch", "32", "--threads", "1",
          "--dropout", "0", "--input-dropout", "0", "--seed", "3", "--shuffle-buffer", "256"]


def test_two_gloo_processes_train_as_one_with_the_same_global_batch(data, tmp_path):
    two, one = str(tmp_path / "two.nplm"), str(tmp_path / "one.nplm")
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        "-m", "nplm", "train", "--engine", "torch", "--train", data[0], "--out", two] + COMMON,
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert main(["train", "--engine", "torch", "--train", data[0], "--out", one] + COMMON) == 0
    h2, h1 = _history(two), _history(one)
    assert h2["processes"] == 2 and h1["processes"] == 1
    l2, l1 = [e["loss"] for e in h2["history"]], [e["loss"] for e in h1["history"]]
    assert len(l2) == len(l1) == 2
    assert l2[1] < l2[0]
    assert np.allclose(l2, l1, rtol=0.03)
    ppl = []
    for path in (two, one):
        m = nplm.Model(path)
        lines = open(data[1]).read().split("\n")[:40]
        ppl.append(np.mean([m.perplexity(s) for s in lines if s]))
    assert np.isfinite(ppl).all() and abs(ppl[0] / ppl[1] - 1) < 0.05


def test_resume_within_an_epoch_gives_the_uninterrupted_model(data, tmp_path):
    cfg = KINDS["class-nce-diagonal"]
    whole = _train(data, tmp_path / "whole.nplm", cfg, epochs=2)
    out = str(tmp_path / "cut.nplm")
    tc = TrainConfig(epochs=2, minibatch=16, threads=1)
    te.train([data[0]], data[1], out, cfg, tc, te.TorchOptions(stop_after_steps=5), progress=False,
             log=lambda s: None)
    state = container.read(out + ".ckpt").config["checkpoint"]
    assert (state["epoch"], state["step"]) == (0, 5)
    resumed = te.train([data[0]], data[1], out, None, None, resume=True, progress=False, log=lambda s: None)
    for n in PARAM_NAMES:
        assert np.array_equal(whole.params[n], resumed.params[n]), n


def _refused(argv, capsys):
    assert main(argv) == 1
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_unsupported_options_are_refused_by_name(data, tmp_path, capsys):
    base = ["train", "--train", data[0], "--out", str(tmp_path / "r.nplm")]
    torch_ = base + ["--engine", "torch"]
    assert "--tie-embeddings is not supported by --engine torch" in _refused(
        torch_ + ["--tie-embeddings", "--embedding-dim", "8"], capsys)
    assert "--ensemble is not supported by --engine torch" in _refused(torch_ + ["--ensemble", "2"], capsys)
    assert "--device needs --engine torch" in _refused(base + ["--device", "cpu"], capsys)
    assert "the cython engine reads one training file" in _refused(base[:3] + [data[1]] + base[3:], capsys)
    if not torch.cuda.is_available():
        assert "--device cuda: torch sees no CUDA device" in _refused(torch_ + ["--device", "cuda"], capsys)
    with pytest.raises(ValueError, match="--parallel"):
        te.train([data[0]], None, str(tmp_path / "p.nplm"), KINDS["tree-mle"], TrainConfig(parallel="blas"))


def test_a_cython_checkpoint_is_not_resumed_by_the_torch_engine(data, tmp_path, capsys):
    out = str(tmp_path / "c.nplm")
    args = ["train", "--train", data[0], "--out", out, "--order", "3", "--embedding-dim", "8", "--epochs", "1",
            "--keep-checkpoint", "--threads", "1"]
    assert main(args) == 0
    msg = _refused(args + ["--resume", "--engine", "torch"], capsys)
    assert "written by the cython engine; resume it with --engine cython" in msg
