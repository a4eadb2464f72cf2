"""Every malformed model file is a ModelLoadError naming it: no KeyError, IndexError
or other exception escapes the reader.

A neural binary holds the structure arrays of every output kind (class layout,
Huffman tree), but only its own kind's were checked while all were read: a file
missing another kind's (``points``, ``codes``, ``word_class``, ...) raised KeyError.
A net now keeps its own kind's arrays (checked, shapes included) and placeholders
for the others."""
import numpy as np
import pytest

import nplm
from nplm.io import container

from helpers import make_net

KINDS = ["softmax-full-2", "class-full-1", "tree-full-1"]
STRUCTS = ["class_start", "class_words", "codes", "lengths", "points", "word_class", "word_pos"]
OWN = {"softmax-full-2": (), "class-full-1": ("class_start", "class_words", "word_class", "word_pos"),
       "tree-full-1": ("codes", "lengths", "points")}


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    d = tmp_path_factory.mktemp("structs")
    out = {}
    for kind in KINDS:
        path = d / f"{kind}.nplm"
        make_net(kind).save(str(path))
        out[kind] = path
    return out


def _rewrite(src, dst, drop=None, replace=None):
    c = container.read(str(src))
    arrays = {n: np.array(a) for n, a in c.arrays.items() if n != drop}
    arrays.update(replace or {})
    container.write(str(dst), c.kind, c.config, arrays)
    return str(dst)


def _scores(path):
    m = nplm.Model(path)
    return [m.score(s) for s in ("w1 w2 w3", "the w5 w6 w7 w8")]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", STRUCTS)
def test_missing_structure_array(nets, tmp_path, kind, name):
    path = _rewrite(nets[kind], tmp_path / "m.nplm", drop="struct." + name)
    if name in OWN[kind]:
        with pytest.raises(nplm.ModelLoadError) as e:
            nplm.Model(path)
        assert path in str(e.value) and name in str(e.value)
    else:       # another kind's array: not needed, the model scores as before
        assert _scores(path) == pytest.approx(_scores(str(nets[kind])), abs=1e-6)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", STRUCTS)
@pytest.mark.parametrize("shape", [(3,), (0,), (2, 2, 2), ()])
def test_wrongly_shaped_structure_array(nets, tmp_path, kind, name, shape):
    path = _rewrite(nets[kind], tmp_path / "m.nplm",
                    replace={"struct." + name: np.zeros(shape, np.int8 if name == "codes" else np.int32)})
    if name in OWN[kind]:
        with pytest.raises(nplm.ModelLoadError) as e:
            nplm.Model(path)
        assert path in str(e.value)
    else:
        assert _scores(path) == pytest.approx(_scores(str(nets[kind])), abs=1e-6)


def test_cli_reports_a_damaged_net_without_a_traceback(nets, tmp_path):
    import subprocess
    import sys

    from _bounded import ROOT
    path = _rewrite(nets["tree-full-1"], tmp_path / "m.nplm", replace={"struct.points": np.zeros(7, np.int32)})
    r = subprocess.run([sys.executable, "-m", "nplm", "query", path], input=b"w1 w2\n", capture_output=True,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, timeout=120)
    err = r.stderr.decode()
    assert r.returncode == 1 and "Traceback" not in err and path in err, err
