"""`nplm kenlm-shim`: after `install`, every new process — a subprocess, spawn and
forkserver workers — gets nplm from `import kenlm`, and importlib.metadata finds a
kenlm distribution (datatrove's check); `remove` leaves the folder as it was; a real
kenlm in the folder is refused without --force and put back by `remove` after it."""
import filecmp
import importlib.metadata
import os
import shutil
import subprocess
import sys

import pytest

from nplm.cli.main import main

from helpers import ROOT

ARPA = str(ROOT / "examples" / "toy.arpa")


def child(code, target):
    """Run ``code`` in a new interpreter whose path starts with the shim's folder."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), str(ROOT)]))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_install_then_every_process_imports_nplm_as_kenlm(tmp_path, capsys):
    target = tmp_path / "site"
    assert main(["kenlm-shim", "install", "--target", str(target)]) == 0
    assert "is nplm's shim" in capsys.readouterr().out
    # a dependency check as datatrove makes it: the module is found and the
    # distribution is installed, under the name kenlm
    out = child("import importlib.util, importlib.metadata as md\n"
                "assert importlib.util.find_spec('kenlm') is not None\n"
                "d = md.distribution('kenlm'); print(d.metadata['Name'], md.version('kenlm'))\n"
                "import kenlm, nplm\n"
                "assert kenlm is nplm\n"
                f"print(kenlm.Model({ARPA!r}).score('the cat sat'))\n", target)
    name, version, score = out.split()
    import nplm
    assert (name, version) == ("kenlm", f"0.3.0+nplm.{nplm.__version__}")
    assert float(score) == pytest.approx(nplm.Model(ARPA).score("the cat sat"), abs=1e-6)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_workers_of_every_start_method_import_nplm_as_kenlm(tmp_path, method):
    target = tmp_path / "site"
    assert main(["kenlm-shim", "install", "--target", str(target)]) == 0
    (tmp_path / "work.py").write_text(
        "def score(line):\n"
        "    import kenlm\n"
        f"    return kenlm.__name__, kenlm.Model({ARPA!r}).score(line)\n")
    out = child(f"import multiprocessing as mp, sys\nsys.path.insert(0, {str(tmp_path)!r})\nimport work\n"
                "if __name__ == '__main__':\n"
                f"    with mp.get_context({method!r}).Pool(2) as pool:\n"
                "        print(pool.map(work.score, ['the cat sat', 'a dog']))\n", target)
    assert out.count("'nplm'") == 2


def test_remove_leaves_the_folder_as_it_was(tmp_path):
    target = tmp_path / "site"
    target.mkdir()
    (target / "other.py").write_text("x = 1\n")
    assert main(["kenlm-shim", "install", "--target", str(target)]) == 0
    assert main(["kenlm-shim", "remove", "--target", str(target)]) == 0
    assert sorted(os.listdir(target)) == ["other.py"]


def test_a_real_kenlm_is_refused_then_kept_aside_and_put_back(tmp_path, capsys):
    real = importlib.metadata.distribution("kenlm")
    target = tmp_path / "site"
    for f in real.files:
        src = real.locate_file(f)
        if str(f).split("/")[0].split(".")[0] in ("kenlm", f"kenlm-{real.version}") and os.path.isfile(src):
            (target / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target / f)
    before = sorted(p.relative_to(target) for p in target.rglob("*"))
    assert before
    assert main(["kenlm-shim", "install", "--target", str(target)]) == 1
    assert "holds a real kenlm" in capsys.readouterr().err
    assert sorted(p.relative_to(target) for p in target.rglob("*")) == before
    assert main(["kenlm-shim", "install", "--target", str(target), "--force"]) == 0
    assert child("import kenlm, nplm; print(kenlm is nplm)", target).strip() == "True"
    assert main(["kenlm-shim", "remove", "--target", str(target)]) == 0
    after = sorted(p.relative_to(target) for p in target.rglob("*") if "__pycache__" not in p.parts)
    assert after == [p for p in before if "__pycache__" not in p.parts]
    for rel in after:
        if (target / rel).is_file():
            assert filecmp.cmp(target / rel, real.locate_file(rel), shallow=False)
