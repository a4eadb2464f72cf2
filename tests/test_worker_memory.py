"""The memory of a worker process that scores with one KenLM binary: ``import nplm``
imports nearly nothing, its first Model what querying needs and nothing else (no estimation, interpolation, neural
kernels or command line), and importing nplm and loading the PTB KN5 probing file adds
at most 1.5 times what importing the real kenlm and loading the same file adds."""
import json
import subprocess
import sys

import pytest

import nplm

from helpers import DATA, need_shared

IMPORT_MODULES = {"nplm", "nplm.errors"}
QUERY_MODULES = {"nplm", "nplm._kernels", "nplm._threads", "nplm.errors", "nplm.io", "nplm.io._mapguard",
                 "nplm.io.files", "nplm.io.resources", "nplm.model"}

MEASURE = """
import json, sys
def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
before = rss()
module = __import__(sys.argv[1])
config = module.Config()
config.show_progress = False
model = module.Model(sys.argv[2], config)
total = sum(model.score(line) for line in open(sys.argv[3]))
print(json.dumps({"added_mb": rss() - before, "total": total}))
"""


def _imported(code):
    r = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(sorted(m for m in sys.modules "
                        "if m.startswith('nplm')))"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return set(eval(r.stdout.strip().splitlines()[-1]))


def test_import_nplm_loads_almost_nothing():
    assert _imported("import nplm") == IMPORT_MODULES


def test_the_kenlm_api_loads_only_the_query_path():
    assert _imported("import nplm\nnplm.Model, nplm.State, nplm.Config") == QUERY_MODULES


def test_the_rest_loads_on_first_use():
    loaded = _imported("import nplm\nnplm.estimate, nplm.interpolate, nplm.rescore, nplm.InterpolatedModel")
    assert {"nplm.backoff.kneser_ney", "nplm.compose.interpolate", "nplm.compose.rescore"} <= loaded
    assert {"estimate", "interpolate", "rescore", "InterpolatedModel"} <= set(dir(nplm))


def test_a_kenlm_binary_loads_its_reader_only():
    loaded = _imported("import nplm\nnplm.Model('examples/toy.arpa')")
    assert not {m for m in loaded if m.startswith(("nplm.neural", "nplm.compose", "nplm.cli",
                                                   "nplm.backoff.estimate"))}


def _measure(module, model, text):
    r = subprocess.run([sys.executable, "-c", MEASURE, module, str(model), str(text)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.filterwarnings("ignore:Note. <unk> appears")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmRSS from /proc")
def test_worker_memory_against_kenlm(tmp_path):
    need_shared()
    arpa, probing = tmp_path / "kn5.arpa", tmp_path / "kn5.probing"
    nplm.estimate(str(DATA / "ptb" / "ptb.train.txt"), 5, arpa=str(arpa), progress=False)
    assert nplm.build_binary(str(arpa), str(probing)) == "probing"
    text = DATA / "ptb" / "ptb.test.txt"
    theirs = _measure("kenlm", probing, text)
    ours = _measure("nplm", probing, text)
    assert ours["total"] == theirs["total"]
    assert ours["added_mb"] <= 1.5 * theirs["added_mb"], (ours, theirs)
