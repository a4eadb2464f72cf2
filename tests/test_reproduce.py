"""The reproduction pipeline end to end in --quick mode on a PTB subset: the report is
written, every stage that succeeded has its rows, the perplexities are sane and agree
with independent computations (the real kenlm module, a pure-Python unigram model),
and a stage that cannot run is reported as "not available" instead of crashing."""
import json
import math
from pathlib import Path

import pytest

from nplm.cli import main as cli
from nplm.recipes.ptb import PUBLISHED, Settings, reproduce, stage_names

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
PTB = SHARED / "data" / "ptb"

# Which rows each stage adds to the table (by model-name prefix).
STAGE_ROWS = {
    "KN1": "unigram (KN1)", "KN3": "KN3", "KN5": "KN5", "kenlm reference": "KN5 via kenlm",
    "Vaswani NCE": "Vaswani NCE", "Baltescu class NCE": "Baltescu class NCE",
    "V-NNLM fallback": "V-NNLM fallback", "interpolate linear": "KN5 + ",
    "interpolate loglinear": "KN5 + ", "distil": " distilled to ",
    "quantise float16": " float16", "quantise int8": " int8",
}


def need_ptb():
    if not PTB.is_dir():
        pytest.skip("../shared (PTB data) is absent")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    need_ptb()
    out = tmp_path_factory.mktemp("reproduce")
    run = reproduce(str(PTB), str(out), Settings.quick_preset(), log=lambda m: None)
    data = json.loads((out / "results.json").read_text())
    return out, run, data


def _rows(data, prefix):
    return [r for r in data["rows"] if prefix in r["model"]]


def _row(data, model, normalization=""):
    found = [r for r in data["rows"] if r["model"] == model and r["normalization"] == normalization]
    assert len(found) == 1, (model, normalization, [r["model"] for r in data["rows"]])
    return found[0]


def test_report_files_and_stage_rows(quick):
    out, run, data = quick
    report = (out / "report.md").read_text()
    table = [line for line in report.splitlines() if line.startswith("| ")]
    names = [st["name"] for st in data["stages"]]
    assert names[0] == "data" and data["stages"][0]["status"] == "ok"
    assert set(STAGE_ROWS) <= set(names)
    for st in data["stages"]:
        if st["name"] == "data":
            continue
        rows = _rows(data, STAGE_ROWS[st["name"]])
        if st["status"] == "ok":
            assert rows, f"stage {st['name']} succeeded but added no row"
            for r in rows:
                assert any(line.startswith(f"| {r['model']} |") for line in table), r["model"]
        else:
            assert st["status"].startswith("not available: ") and len(st["status"]) > len("not available: ")
            assert f"| {st['name']} | {st['status']} |" in report
    # The stages whose code is this package's core must work on the subset.
    core = {"KN1", "KN3", "KN5"}
    assert all(st["status"] == "ok" for st in data["stages"] if st["name"] in core)
    section = (out / "results-section.md").read_text()
    assert section.startswith("## Results")
    for v in PUBLISHED.values():
        assert f"| {v:.1f} |" in section


def test_plots_are_png(quick):
    pytest.importorskip("matplotlib", reason="matplotlib (the 'plot' extra) is not installed")
    out, _, data = quick
    assert (out / "perplexity_vs_memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if data["histories"]:
        assert (out / "validation_per_epoch.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_perplexities_finite_and_ordered(quick):
    out, _, data = quick
    for r in data["rows"]:
        if r["test_ppl"] is not None:
            assert math.isfinite(r["test_ppl"]) and r["test_ppl"] > 1.0, r
        if r["size_bytes"] is not None:
            assert r["size_bytes"] > 0
    uni, kn3, kn5 = _row(data, "unigram (KN1)"), _row(data, "KN3"), _row(data, "KN5")
    if any(st["name"] == "kenlm reference" and st["status"] == "ok" for st in data["stages"]):
        ref = _row(data, "KN5 via kenlm module")
        assert ref["test_ppl"] == pytest.approx(kn5["test_ppl"], rel=1e-5)
        assert ref["valid_ppl"] == pytest.approx(kn5["valid_ppl"], rel=1e-5)
    # Context helps: both KN models beat the unigram on test and on valid.
    for kn in (kn3, kn5):
        assert kn["test_ppl"] < 0.8 * uni["test_ppl"]
        assert kn["valid_ppl"] < 0.8 * uni["valid_ppl"]
    # Every row scored on the whole test text counts the same tokens; a time-boxed
    # row scored a prefix and says so.
    n_test = len((out / "data" / "test.txt").read_text().splitlines())
    for r in data["rows"]:
        if r["test_sentences"] == n_test:
            assert r["tokens"] == kn5["tokens"], r
        elif r["test_sentences"] is not None:
            assert r["test_sentences"] < n_test and r["partial"]
            assert f"first {r['test_sentences']} of {n_test}" in r["note"]


def test_unigram_matches_pure_python(quick):
    """The KN1 row's perplexity, recomputed from its ARPA file by hand."""
    out, _, data = quick
    probs = {}
    section = None
    with open(out / "models" / "kn1.arpa", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("\\"):
                section = line
                continue
            if section == "\\1-grams:" and line:
                parts = line.split("\t")
                probs[parts[1]] = float(parts[0])
    # A distribution over every word but <s> (whose ARPA value is a placeholder).
    assert sum(10 ** v for w, v in probs.items() if w != "<s>") == pytest.approx(1.0, abs=1e-4)
    total = n = 0
    for line in (out / "data" / "test.txt").read_text().splitlines():
        for w in line.split() + ["</s>"]:
            total += probs.get(w, probs["<unk>"])
            n += 1
    row = _row(data, "unigram (KN1)")
    assert row["tokens"] == n
    assert row["test_ppl"] == pytest.approx(10 ** (-total / n), rel=1e-5)


def test_kn5_matches_kenlm(quick):
    kenlm = pytest.importorskip("kenlm", reason="the kenlm module is not installed")
    out, _, data = quick
    model = kenlm.Model(str(out / "models" / "kn5.arpa"))
    total = n = 0
    for line in (out / "data" / "test.txt").read_text().splitlines():
        total += model.score(line)
        n += len(line.split()) + 1
    assert _row(data, "KN5")["test_ppl"] == pytest.approx(10 ** (-total / n), rel=1e-5)


def test_neural_rows(quick):
    _, _, data = quick
    ok = {st["name"] for st in data["stages"] if st["status"] == "ok"}
    for label in ("Vaswani NCE", "Baltescu class NCE", "V-NNLM fallback"):
        if label not in ok:
            continue
        rows = _rows(data, label)
        modes = {r["normalization"] for r in rows if r["model"] == label}
        assert "unnormalized" in modes and len(modes) >= 2
        for r in rows:
            if r["model"] == label and r["normalization"] in ("exact", "class"):
                # A trained model must beat the uniform distribution over its vocabulary
                # (the subset has a few thousand word types).
                assert r["test_ppl"] < 3000, r
                assert r["train_s"] > 0 and r["us_per_token"] > 0 and r["tokens_per_s"] > 0
    hist = data["histories"]
    for h in hist.values():
        assert [e["epoch"] for e in h] == list(range(1, len(h) + 1))
        assert all(math.isfinite(e["valid_ppl"]) for e in h)


def test_interpolation_tuned_no_worse_than_components(quick):
    """Tuned weights include the one-component corners, so the tuned valid perplexity
    cannot exceed either component's (tolerance for the tuner's stopping rule)."""
    _, _, data = quick
    kn5 = _row(data, "KN5")
    for mode in ("linear", "loglinear"):
        st = [s for s in data["stages"] if s["name"] == f"interpolate {mode}"][0]
        if st["status"] != "ok":
            continue
        row = [r for r in data["rows"] if r["family"] == "interpolated" and r["normalization"] == mode][0]
        neural_label = row["model"].split(" + ", 1)[1]
        nn = [r for r in data["rows"] if r["model"] == neural_label and r["normalization"] in ("exact", "class")][0]
        assert row["valid_ppl"] <= min(kn5["valid_ppl"], nn["valid_ppl"]) * (1 + 1e-3)
        assert math.isfinite(row["test_ppl"])


def test_missing_stage_is_reported_not_raised(tmp_path):
    """Interpolation with no neural model trained: the stage fails, the report says why."""
    need_ptb()
    out = tmp_path / "partial"
    run = reproduce(str(PTB), str(out), Settings.quick_preset(), log=lambda m: None,
                    only={"KN5", "interpolate linear"})
    status = {st.name: st.status for st in run.stages}
    assert status["KN5"] == "ok"
    assert status["interpolate linear"] == "not available: RuntimeError: no neural model was trained"
    report = (out / "report.md").read_text()
    assert "| interpolate linear | not available: RuntimeError: no neural model was trained |" in report
    assert [r.model for r in run.rows] == ["KN5"]


def test_cli(tmp_path, capsys):
    need_ptb()
    assert cli.main(["reproduce", "--data", str(tmp_path / "absent"), "--out", str(tmp_path / "o")]) == 1
    assert "no such data directory" in capsys.readouterr().err
    assert cli.main(["reproduce", "--data", str(PTB), "--out", str(tmp_path / "o"), "--quick",
                     "--neural-minutes", "0"]) == 1
    out = tmp_path / "o2"
    assert cli.main(["reproduce", "--data", str(PTB), "--out", str(out), "--quick", "--only", "KN3"]) == 0
    data = json.loads((out / "results.json").read_text())
    assert [r["model"] for r in data["rows"]] == ["KN3"]
    assert data["settings"]["quick"] is True


def test_bad_data_dir_contents(tmp_path, capsys):
    """A data directory without the PTB files is an error naming them before anything
    is written (an earlier report in OUT stays)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "ptb.train.txt").write_text("a b\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("earlier")
    with pytest.raises(FileNotFoundError, match="ptb.valid.txt, ptb.test.txt"):
        reproduce(str(tmp_path / "data"), str(out), Settings.quick_preset(), log=lambda m: None)
    assert cli.main(["reproduce", "--data", str(tmp_path / "data"), "--out", str(out), "--quick"]) == 1
    err = capsys.readouterr().err
    assert err == f"nplm: error: --data {tmp_path / 'data'}: no ptb.valid.txt, ptb.test.txt there (the PTB text files)\n"
    assert cli.main(["reproduce", "--data", str(tmp_path / "absent"), "--out", str(out), "--quick"]) == 1
    assert capsys.readouterr().err == f"nplm: error: --data {tmp_path / 'absent'}: no such data directory\n"
    assert sorted(p.name for p in out.iterdir()) == ["report.md"] and (out / "report.md").read_text() == "earlier"


def test_unknown_only_stage_is_refused(tmp_path, capsys):
    """--only bogus ran nothing and rewrote the report with an empty table: now an error
    listing the stages, and OUT is not touched."""
    need_ptb()
    out = tmp_path / "o"
    assert cli.main(["reproduce", "--data", str(PTB), "--out", str(out), "--quick", "--only", "KN3",
                     "--only", "bogus"]) == 1
    err = capsys.readouterr().err
    assert "no stage named 'bogus'" in err and "KN3, KN5, kenlm reference, Vaswani NCE" in err \
        and "quantise int8" in err
    assert not out.exists()
    with pytest.raises(ValueError, match="no stage named 'Interpolate'"):
        reproduce(str(PTB), str(out), Settings.quick_preset(), log=lambda m: None, only={"Interpolate"})
    for p in ("interpolate", "KN", "quantise f", "data"):        # beginnings of stage names pass the check
        assert any(n.startswith(p) for n in stage_names(Settings.quick_preset()))


def test_report_names_the_command_run_and_drops_stale_plots(tmp_path, capsys):
    need_ptb()
    out = tmp_path / "o"
    out.mkdir()
    (out / "validation_per_epoch.png").write_bytes(b"an earlier run's plot")
    assert cli.main(["reproduce", "--data", str(PTB), "--out", str(out), "--quick", "--only", "KN3"]) == 0
    report = (out / "report.md").read_text()
    assert f"Produced by `nplm reproduce --data {PTB} --out {out} --quick --only KN3` on" in report
    assert "../shared/data/ptb --out report/" not in report
    assert not (out / "validation_per_epoch.png").exists()        # no history this time: not drawn
    assert "validation_per_epoch.png" not in report


def test_reuse_trained_model(quick, tmp_path):
    """--reuse keeps a model trained with the same configuration (and its recorded
    training time) and retrains when the configuration differs."""
    import dataclasses
    import shutil
    out, _, data = quick
    # the quick pipeline always trains this network: a missing stage is a failure, not a skip
    assert any(st["name"] == "Baltescu class NCE" and st["status"] == "ok" for st in data["stages"]), \
        [(st["name"], st["status"]) for st in data["stages"]]
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    model = copy / "models" / "baltescu-class-nce.nplm"
    before = model.read_bytes()
    recorded = json.loads((copy / "models" / "baltescu-class-nce.nplm.train.json").read_text())["train_s"]
    s = dataclasses.replace(Settings.quick_preset(), reuse=True)
    run = reproduce(str(PTB), str(copy), s, log=lambda m: None, only={"Baltescu class NCE"})
    st = [x for x in run.stages if x.name == "Baltescu class NCE"][0]
    assert st.status == "ok" and "reused" in st.detail
    assert model.read_bytes() == before
    assert all(r.train_s == recorded for r in run.rows if r.model == "Baltescu class NCE")
    # A different configuration is trained afresh.
    s = dataclasses.replace(s, noise_samples=20, epochs=1)
    run = reproduce(str(PTB), str(copy), s, log=lambda m: None, only={"Baltescu class NCE"})
    st = [x for x in run.stages if x.name == "Baltescu class NCE"][0]
    assert st.status == "ok" and "reused" not in st.detail
    assert model.read_bytes() != before
