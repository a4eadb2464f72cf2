"""Ensembles of networks: a linear interpolation with tuned weights, one model with
the kenlm API.  Weights (1, 0, 0) give the first network's numbers exactly; tuned
weights beat every member on the validation text; the CLI writes a spec that
nplm.Model loads."""
import json
import math

import pytest

import nplm
from nplm.cli.main import main as cli_main
from nplm.compose.ensemble import ensemble
from nplm.neural.network import NeuralConfig
from nplm.neural.train import TrainConfig, train

from helpers import REFERENCE, need_shared

SENTENCES = ["the company said it expects", "of the new year the stock market fell", "", "zzqx qqq"]


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    """Three tiny networks that differ only by seed, and the validation text."""
    need_shared()
    tmp = tmp_path_factory.mktemp("ens")
    lines = (REFERENCE / "tiny200.txt").read_text().splitlines()
    (tmp / "train.txt").write_text("\n".join(lines[:-30]) + "\n")
    (tmp / "valid.txt").write_text("\n".join(lines[-30:]) + "\n")
    cfg = NeuralConfig(order=3, embedding_dim=8, hidden=(16,), output="softmax", objective="mle")
    paths = []
    for seed in (1, 2, 3):
        tc = TrainConfig(epochs=2, minibatch=16, learning_rate=0.1, threads=1, seed=seed, dropout=0.0)
        path = str(tmp / f"m{seed}.nplm")
        train(tmp / "train.txt", tmp / "valid.txt", path, cfg, tc, log=lambda s: None, progress=False)
        paths.append(path)
    return paths, str(tmp / "valid.txt"), tmp


def _perplexity(model, path):
    lines = [l for l in open(path).read().splitlines() if l.split()]
    total = sum(model.score(l) for l in lines)
    tokens = sum(len(l.split()) + 1 for l in lines)
    return 10.0 ** (-total / tokens)


def test_weight_one_on_the_first_network_reproduces_it(members):
    paths, _, _ = members
    mix, report = ensemble(paths, weights=[1.0, 0.0, 0.0])
    assert report is None
    first = nplm.Model(paths[0])
    valid = open(members[1]).read().splitlines()
    for s in SENTENCES + valid[:10]:
        assert list(mix.full_scores(s)) == list(first.full_scores(s))
        assert mix.score(s) == first.score(s)


def test_tuned_weights_beat_every_member_on_the_validation_text(members):
    paths, valid, _ = members
    mix, report = ensemble(paths, dev=valid)
    ens = _perplexity(mix, valid)
    alone = [_perplexity(nplm.Model(p), valid) for p in paths]
    assert all(ens < a for a in alone), (ens, alone)
    assert report["dev_perplexity"] == pytest.approx(ens, rel=1e-4)
    assert report["members_dev_perplexity"] == pytest.approx(alone, rel=1e-4)
    assert sum(report["weights"]) == pytest.approx(1.0)
    assert all(w > 0 for w in report["weights"])


def test_cli_writes_a_spec_that_loads_as_one_model(members, capsys):
    paths, valid, tmp = members
    out = tmp / "ens.json"
    assert cli_main(["ensemble", *paths, "--tune", valid, "-o", str(out)]) == 0
    assert "dev perplexity" in capsys.readouterr().err
    spec = json.loads(out.read_text())
    assert spec["ensemble"] is True and spec["mode"] == "linear"
    model = nplm.Model(str(out))
    mix, _ = ensemble(paths, weights=spec["weights"])
    for s in SENTENCES:
        assert model.score(s) == mix.score(s)
    assert math.isclose(_perplexity(model, valid), spec["dev_perplexity"], rel_tol=1e-4)


def test_cli_refuses_one_member_and_mismatched_weights(members, capsys):
    paths, _, tmp = members
    assert cli_main(["ensemble", paths[0], "-o", str(tmp / "x.json")]) == 1
    assert "at least two models" in capsys.readouterr().err
    assert cli_main(["ensemble", *paths, "--weight", "1", "-o", str(tmp / "x.json")]) == 1
    assert "1 --weight for 3 models" in capsys.readouterr().err


def test_train_ensemble_trains_members_by_seed_and_writes_the_tuned_spec(members, capsys):
    _, valid, tmp = members
    out = tmp / "trained.json"
    assert cli_main(["train", "--train", str(tmp / "train.txt"), "--valid", valid, "--out", str(out),
                     "--ensemble", "2", "--order", "3", "--embedding-dim", "8", "--hidden", "16",
                     "--output", "softmax", "--objective", "mle", "--epochs", "1", "--minibatch", "16",
                     "--threads", "1", "--seed", "4", "--dropout", "0", "--input-dropout", "0",
                     "--quiet"]) == 0
    assert "ensemble weights" in capsys.readouterr().err
    paths = [str(tmp / "trained.m0.nplm"), str(tmp / "trained.m1.nplm")]
    a, b = (open(p, "rb").read() for p in paths)
    assert a != b                       # other seeds, other networks
    spec = json.loads(out.read_text())
    assert spec["ensemble"] is True and len(spec["models"]) == 2
    model = nplm.Model(str(out))
    ens = _perplexity(model, valid)
    assert ens <= min(_perplexity(nplm.Model(p), valid) for p in paths) + 1e-9
    assert cli_main(["train", "--train", str(tmp / "train.txt"), "--out", str(tmp / "x.json"),
                     "--ensemble", "2", "--epochs", "1", "--quiet"]) == 1
    assert "validation text" in capsys.readouterr().err
