"""What starting nplm imports: scipy (whose BLAS only the neural kernels use) and
tqdm (only drawn bars use it) load with their first use, torch only for ``nplm train
--engine torch``, so ``import nplm``, every
``nplm`` command's start and back-off work (ARPA and KenLM models, build-binary)
never import them; a neural model loads the BLAS and scores."""
import json

from _bounded import run_python

from helpers import make_net

LOADED = ("import sys, json; "
          "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'scipy', 'tqdm', 'torch'})))")


def _loaded(code):
    r = run_python(code + "\n" + LOADED, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_import_and_command_start_load_neither():
    assert _loaded("import nplm\nimport nplm.cli.main") == []


def test_backoff_work_loads_neither(tmp_path):
    out = tmp_path / "toy.bin"
    assert _loaded(f"""
import nplm
from nplm.cli.main import main
assert main(["build-binary", "trie", "examples/toy.arpa", {str(out)!r}]) == 0
assert main(["build-binary", "examples/toy.arpa", {str(out) + ".probing"!r}]) == 0
config = nplm.Config()
config.show_progress = False
config.arpa_complain = nplm.ARPALoadComplain.NONE
for path in ({str(out)!r}, {str(out) + ".probing"!r}, "examples/toy.arpa"):
    m = nplm.Model(path, config)
    m.score("the dog saw a cat"), list(m.full_scores("a cat"))
""") == []


def test_a_neural_model_loads_the_blas(tmp_path):
    path = tmp_path / "net.nplm"
    make_net("softmax-full-2").save(str(path))
    assert _loaded(f"""
import math, nplm
m = nplm.Model({str(path)!r})
assert math.isfinite(m.score("w1 w2 w3"))
assert len(m.score_sentences(["w1 w2"] * 100)) == 100
""") == ["scipy"]


def test_an_estimate_whose_stderr_is_no_terminal_loads_neither(tmp_path):
    """(its stage headers and statistics, no bar: tqdm stays unloaded)"""
    assert _loaded(f"""
from nplm.backoff.estimate import estimate
estimate("examples/toy.txt", 3, arpa={str(tmp_path / "toy.arpa")!r}, discount_fallback=True, progress=True)
""") == []
