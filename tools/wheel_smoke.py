"""A built wheel's smoke test (cibuildwheel's test-command, and tools/check_numpy1.sh):
the kernels import, a tiny model estimated from text scores as its ARPA says, and
KenLM's program names are installed beside the interpreter."""
import os
import shutil
import subprocess
import sys
import tempfile

import nplm

TEXT = "the cat sat on the mat\nthe dog sat on the log\na cat and a dog\n" * 3

with tempfile.TemporaryDirectory() as d:
    text, arpa = os.path.join(d, "t.txt"), os.path.join(d, "t.arpa")
    with open(text, "w") as f:
        f.write(TEXT)
    nplm.estimate(text, 3, arpa, progress=False, discount_fallback=True)
    model = nplm.Model(arpa)
    assert model.order == 3
    assert -10 < model.score("the cat sat on the log") < 0
    bindir = os.path.dirname(sys.executable)
    for name in ("lmplz", "build_binary", "query", "filter", "count_ngrams", "fragment", "interpolate"):
        assert shutil.which(name, path=bindir), f"{name} is not installed beside {sys.executable}"
    lmplz = shutil.which("lmplz", path=bindir)
    out = subprocess.run([lmplz, "-o", "3", "--discount_fallback", "--text", text], capture_output=True, check=True).stdout
    with open(arpa, "rb") as f:
        assert out == f.read(), "lmplz and nplm.estimate disagree"
print(f"nplm {nplm.__version__} wheel: kernels, estimation and KenLM's program names work")
