"""Every kind of model nplm loads, as a component of every command that takes models:
ARPA, nplm back-off binary, KenLM probing / trie / quantised trie (nplm's writer is
KenLM's build_binary byte for byte), a neural model and an interpolation spec, through
perplexity, interpolate, distil (teacher and --lower), rescore and ensemble."""
import json

import pytest

from nplm.cli.main import main

TEXT = "examples/toy.txt"
KINDS = ["arpa", "nplm", "probing", "trie", "trie-q8b8", "neural", "spec"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("kinds")
    paths = {"arpa": "examples/toy.arpa"}
    builds = {"nplm": ["nplm"], "probing": ["probing"], "trie": ["trie"], "trie-q8b8": ["-q", "8", "-b", "8", "trie"]}
    for kind, flags in builds.items():
        paths[kind] = str(d / f"toy.{kind}")
        assert main(["build-binary", *flags, "examples/toy.arpa", paths[kind], "--quiet"]) == 0
    paths["neural"] = str(d / "toy-nn.nplm")
    assert main(["train", "--train", TEXT, "--valid", TEXT, "--embedding-dim", "8", "--epochs", "1",
                 "--seed", "1", "--quiet", "--out", paths["neural"]]) == 0
    paths["spec"] = str(d / "mix.json")
    assert main(["interpolate", "--model", paths["probing"], "--model", paths["neural"], "--tune", TEXT,
                 "--out", paths["spec"], "--quiet"]) == 0
    return paths


def _perplexity(capsys, path):
    assert main(["perplexity", path, TEXT]) == 0
    return float(capsys.readouterr().out.split("\t")[1].split()[0])


@pytest.mark.parametrize("kind", KINDS)
def test_perplexity(models, capsys, kind):
    ppl = _perplexity(capsys, models[kind])
    if kind in ("nplm", "probing", "trie"):
        assert ppl == pytest.approx(_perplexity(capsys, models["arpa"]), rel=1e-6)
    assert 1 < ppl < 100


@pytest.mark.parametrize("kind", KINDS)
def test_interpolate_with_a_network(models, capsys, tmp_path, kind):
    out = tmp_path / "mix.json"
    assert main(["interpolate", "--model", models[kind], "--model", models["neural"], "--tune", TEXT,
                 "--out", str(out), "--quiet"]) == 0
    spec = json.loads(out.read_text())
    assert sum(spec["weights"]) == pytest.approx(1.0)
    assert _perplexity(capsys, str(out)) > 1


@pytest.mark.parametrize("kind", KINDS)
def test_distil_teacher(models, tmp_path, capsys, kind):
    arpa = tmp_path / "d.arpa"
    assert main(["distil", models[kind], "--text", TEXT, "--order", "3", "--arpa", str(arpa), "--quiet",
                 "--quality", "fast"]) == 0
    assert capsys.readouterr().err == ""
    assert _perplexity(capsys, str(arpa)) > 1


@pytest.mark.parametrize("kind", ["arpa", "nplm", "probing", "trie", "trie-q8b8"])
def test_distil_lower(models, tmp_path, capsys, kind):
    arpa = tmp_path / "d.arpa"
    assert main(["distil", models["spec"], "--text", TEXT, "--order", "3", "--arpa", str(arpa), "--quiet",
                 "--lower", models[kind]]) == 0
    assert _perplexity(capsys, str(arpa)) > 1


@pytest.mark.parametrize("kind", KINDS)
def test_rescore(models, tmp_path, capsys, kind):
    nbest = tmp_path / "nbest.txt"
    nbest.write_text("0\tthe cat sat\n0\tcat the sat\n1\ton the mat\n")
    assert main(["rescore", models[kind], "--nbest", str(nbest), "--out", str(tmp_path / "out.txt")]) == 0
    rows = (tmp_path / "out.txt").read_text().splitlines()
    assert len(rows) == 3 and all(len(r.split("\t")) == 3 for r in rows)


@pytest.mark.parametrize("kind", KINDS)
def test_ensemble(models, tmp_path, capsys, kind):
    out = tmp_path / "ens.json"
    assert main(["ensemble", models[kind], models["neural"], "--tune", TEXT, "--out", str(out), "--quiet"]) == 0
    assert _perplexity(capsys, str(out)) > 1
