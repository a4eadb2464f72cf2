"""Under an address-space limit (ulimit -v), neural models fail with a clear error
instead of hanging inside OpenBLAS, which retries a refused allocation of its 32 MiB
work buffer without end (a neural load under a ~200 MB limit hung).  nplm loads
scipy's OpenBLAS with the first neural model (back-off models never need it), makes
it single-threaded when the limit is tight, refuses a neural model when the limit
cannot hold the library or a work buffer (then reserves one with a first product)."""
from _bounded import run_python

from helpers import make_net

VM = "int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()"


def test_a_limit_too_small_for_blas_refuses_neural_models_only(tmp_path):
    path = tmp_path / "net.nplm"
    make_net("softmax-full-2").save(str(path))
    r = run_python(f"""
import resource, numpy
vm = {VM}
resource.setrlimit(resource.RLIMIT_AS, (vm + (60 << 20), vm + (60 << 20)))
import nplm
print("imported")
try:
    nplm.Model({str(path)!r})
    print("loaded")
except nplm.ModelLoadError as e:
    print("refused:", e)
""", timeout=60, env={"OPENBLAS_NUM_THREADS": ""})
    assert r.returncode == 0, r.stderr[-2000:]
    first, second = r.stdout.split("\n", 1)
    assert first == "imported", r.stdout
    assert second.startswith("refused:") and "ulimit -v" in second and str(path) in second, r.stdout


def test_neural_load_under_a_limit_too_small_for_a_blas_buffer(tmp_path):
    path = tmp_path / "net.nplm"
    make_net("softmax-full-2").save(str(path))
    r = run_python(f"""
import resource, nplm, nplm.model      # (the query path, numpy with it, loads before the limit)
vm = {VM}
resource.setrlimit(resource.RLIMIT_AS, (vm + (40 << 20), vm + (40 << 20)))
try:
    m = nplm.Model({str(path)!r})
    print("loaded", m.score_sentences(["w1 w2 w3"] * 2000)[:1])
except nplm.ModelLoadError as e:
    print("refused:", e)
""", timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("refused:") and "ulimit -v" in r.stdout and str(path) in r.stdout, r.stdout


def test_tight_limit_makes_blas_single_threaded(tmp_path):
    path = tmp_path / "net.nplm"
    make_net("softmax-full-2").save(str(path))
    r = run_python(f"""
import os, resource, numpy
vm = {VM}
resource.setrlimit(resource.RLIMIT_AS, (vm + (200 << 20), vm + (200 << 20)))
os.environ.pop("OPENBLAS_NUM_THREADS", None)
import nplm
nplm.Model({str(path)!r})
print(os.environ.get("OPENBLAS_NUM_THREADS"))
""", timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "1"


def test_a_thread_the_limit_does_not_allow_is_a_clear_error(tmp_path):
    """build-binary reads its ARPA in a second thread; under a limit that leaves no room
    for a thread's stack, one line says so (it was a RuntimeError traceback)."""
    from _bounded import ROOT
    r = run_python(f"""
import resource, threading
from nplm.cli.main import main
vm = {VM}
resource.setrlimit(resource.RLIMIT_AS, (vm + (4 << 20), vm + (4 << 20)))
print("status", main(["build-binary", {str(ROOT / "examples" / "toy.arpa")!r}, {str(tmp_path / "m.bin")!r}]))
""", timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["status", "1"], r.stdout
    assert r.stderr.startswith("nplm: error: out of memory: cannot start a thread") and "Traceback" not in r.stderr
    assert not (tmp_path / "m.bin").exists()
