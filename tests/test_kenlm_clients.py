"""nplm beside programs that ``import kenlm`` themselves: ``nplm.install_as_kenlm()``,
model files under the names such programs insist on, and pyctcdecode's decoder
(where pyctcdecode is installed; tools/check_numpy1.sh installs it with numpy 1.26)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOY_ARPA = ROOT / "examples" / "toy.arpa"
TOY_TEXT = ROOT / "examples" / "toy.txt"


def run_python(code, *args):
    import nplm
    env = dict(os.environ)
    if ROOT in Path(nplm.__file__).resolve().parents:      # this clone's nplm, not an installed one
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=Path(nplm.__file__).resolve().parents[1], timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


# A library module written for kenlm: it imports kenlm at its own import, as
# pyctcdecode and datatrove do.
CLIENT = '''
import kenlm

def sentence_scores(path, lines):
    model = kenlm.Model(path)
    state, out = kenlm.State(), kenlm.State()
    scores = []
    for line in lines:
        model.BeginSentenceWrite(state)
        total = 0.0
        for word in line.split() + ["</s>"]:
            total += model.BaseScore(state, word, out)
            state, out = out, state
        scores.append(total)
    return kenlm.__name__, scores
'''


def test_install_as_kenlm_makes_kenlm_clients_use_nplm(tmp_path):
    (tmp_path / "client.py").write_text(CLIENT)
    out = run_python(
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import nplm\n"
        "nplm.install_as_kenlm()\n"
        "import kenlm\n"
        "assert kenlm is nplm and sys.modules['kenlm'] is nplm\n"
        "import client\n"
        "lines = open(sys.argv[3]).read().splitlines()\n"
        "print(json.dumps(client.sentence_scores(sys.argv[2], lines)))\n",
        tmp_path, TOY_ARPA, TOY_TEXT)
    name, scores = json.loads(out)
    assert name == "nplm"
    kenlm = pytest.importorskip("kenlm")
    model = kenlm.Model(str(TOY_ARPA))
    expected = [model.score(line, bos=True, eos=True) for line in TOY_TEXT.read_text().splitlines()]
    assert scores == pytest.approx(expected, abs=1e-4)


def test_install_as_kenlm_in_this_process_is_reversible():
    import nplm
    before = sys.modules.get("kenlm")
    try:
        nplm.install_as_kenlm()
        import kenlm
        assert kenlm is nplm
        assert kenlm.Model(str(TOY_ARPA)).order == 3
    finally:
        if before is None:
            sys.modules.pop("kenlm", None)
        else:
            sys.modules["kenlm"] = before


@pytest.mark.parametrize("suffix", [".bin", ".arpa", ".binary", ".klm"])
def test_an_nplm_binary_loads_under_kenlm_suffixes(tmp_path, suffix):
    import nplm
    path = tmp_path / f"toy{suffix}"
    nplm.build_binary(str(TOY_ARPA), str(path))
    reference = nplm.Model(str(TOY_ARPA))
    model = nplm.Model(str(path))
    for line in TOY_TEXT.read_text().splitlines():
        assert model.score(line) == reference.score(line)


# Logits that spell a sentence with a near-tie at each word, so that the language
# model decides the beam; pyctcdecode's decoder must then agree with kenlm's.
DECODE = '''
import json, sys
import numpy as np
if sys.argv[1] == "nplm":
    import nplm
    nplm.install_as_kenlm()
from pyctcdecode import build_ctcdecoder
import kenlm
labels = [""] + [" "] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
rng = np.random.default_rng(0)
text = "the cat sat on the mat"
frames = []
for ch in text:
    row = rng.uniform(0, 0.1, len(labels))
    row[labels.index(ch)] = 1.0
    frames += [row, rng.uniform(0, 0.1, len(labels)) + np.eye(len(labels))[0]]
logits = np.log(np.array(frames) / np.array(frames).sum(1, keepdims=True))
decoder = build_ctcdecoder(labels, kenlm_model_path=sys.argv[2])
beams = decoder.decode_beams(logits, beam_width=20)
print(json.dumps({"kenlm": kenlm.__name__,
                  "beams": [[b[0], round(float(b[-2]), 3), round(float(b[-1]), 3)] for b in beams[:5]]}))
'''


@pytest.mark.parametrize("suffix", [".arpa", ".bin"])
def test_pyctcdecode_decodes_with_nplm_as_with_kenlm(tmp_path, suffix):
    pytest.importorskip("pyctcdecode", reason="pyctcdecode (numpy<2) is installed by tools/check_numpy1.sh")
    pytest.importorskip("kenlm")
    import nplm
    model = tmp_path / f"lm{suffix}"
    if suffix == ".arpa":
        model.write_bytes(TOY_ARPA.read_bytes())
    else:
        nplm.build_binary(str(TOY_ARPA), str(model))
    # kenlm reads the ARPA text under the same name: both decoders see the same suffix
    (tmp_path / "kenlm").mkdir()
    reference = tmp_path / "kenlm" / model.name
    reference.write_bytes(TOY_ARPA.read_bytes())
    ours = json.loads(run_python(DECODE, "nplm", model))
    theirs = json.loads(run_python(DECODE, "kenlm", reference))
    assert ours["kenlm"] == "nplm" and theirs["kenlm"] == "kenlm"
    assert ours["beams"][0][0] == theirs["beams"][0][0]
    assert ours["beams"] == theirs["beams"]
