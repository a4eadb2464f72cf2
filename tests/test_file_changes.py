"""A loaded model and changes to its file.

* LoadMethod.READ (and PARALLEL_READ) copies an nplm binary into private memory, as
  kenlm's READ does: truncating the file or rewriting it in place changes nothing.
  (Every load method mapped the file: truncation killed the process with SIGBUS
  and an overwrite in place silently changed the scores.)
* The mapping load methods (LAZY, POPULATE_*, the default) read the file while the
  model is used; replacing the file by writing a new one and renaming it over the
  old -- what every nplm writer does -- leaves the loaded model on the old file.
  Truncating it raises MappedFileChanged (a FormatError) in the main thread instead
  of killing the process with SIGBUS; a SIGBUS that is not a read of a model
  file's lost page still does what it did.

Each case runs in a subprocess, so that a SIGBUS fails the test instead of killing
the test run."""
import signal
import sys

import pytest
from _bounded import ROOT, run_python

import nplm

from helpers import REFERENCE, make_net, need_shared

TOY_ARPA = ROOT / "examples" / "toy.arpa"
SENTENCES = ["the dog saw a cat", "w1 w2 w3 w4", "a cat"]


@pytest.fixture(scope="module", params=["backoff", "neural"])
def model_file(request, tmp_path_factory):
    d = tmp_path_factory.mktemp("changes")
    path = d / f"{request.param}.nplm"
    if request.param == "backoff":
        nplm.build_binary(str(TOY_ARPA), str(path))
    else:
        make_net("class-full-1").save(str(path))
    return path


def _after_change(src, tmp_path, method, change):
    """Scores before and after ``change`` (Python source acting on ``path``) is made
    to the file of a model loaded with ``method``, in a child process."""
    path = tmp_path / "m.nplm"
    path.write_bytes(src.read_bytes())
    r = run_python(f"""
import os, nplm
path = {str(path)!r}
cfg = nplm.Config(); cfg.load_method = nplm.LoadMethod.{method}
m = nplm.Model(path, cfg)
before = [m.score(s) for s in {SENTENCES!r}] + list(m.score_sentences({SENTENCES!r}))
{change}
after = [m.score(s) for s in {SENTENCES!r}] + list(m.score_sentences({SENTENCES!r}))
print(before == after, before, after)
""", timeout=120)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    return r.stdout


TRUNCATE = "os.truncate(path, 100)"
OVERWRITE = """
size = os.path.getsize(path)
with open(path, "r+b") as f:
    f.seek(size // 3)
    f.write(b"\\xff" * (size - size // 3))
"""


@pytest.mark.parametrize("method", ["READ", "PARALLEL_READ"])
@pytest.mark.parametrize("change", [TRUNCATE, OVERWRITE], ids=["truncate", "overwrite"])
def test_read_copies_the_model(model_file, tmp_path, method, change):
    assert _after_change(model_file, tmp_path, method, change).startswith("True")


@pytest.mark.parametrize("method", ["LAZY", "POPULATE_OR_LAZY", "POPULATE_OR_READ"])
def test_a_mapped_model_survives_its_file_being_replaced(model_file, tmp_path, method):
    replace = ("from nplm.io.container import read, write\n"
               "c = read(path, copy=True)\n"
               "write(path, c.kind, c.config, {n: a * 0 for n, a in c.arrays.items()})\n")
    assert _after_change(model_file, tmp_path, method, replace).startswith("True")


@pytest.mark.skipif(sys.version_info < (3, 10), reason="the SIGBUS guard needs Python 3.10")
@pytest.mark.parametrize("method", ["LAZY", "POPULATE_OR_LAZY", "POPULATE_OR_READ"])
def test_truncating_a_mapped_model_raises(model_file, tmp_path, method):
    path = tmp_path / "m.nplm"
    path.write_bytes(model_file.read_bytes())
    _truncate_while_loaded(path, method)


def _truncate_while_loaded(path, method):
    """Load ``path`` with ``method``, truncate the file, score: MappedFileChanged naming it."""
    r = run_python(f"""
import os, nplm
cfg = nplm.Config(); cfg.load_method = nplm.LoadMethod.{method}
m = nplm.Model({str(path)!r}, cfg)
m.score("the dog")
os.truncate({str(path)!r}, 100)
try:
    for _ in range(3):
        [m.score(s) for s in {SENTENCES!r}]
        m.score_sentences({SENTENCES!r} * 50)
    print("no exception")
except nplm.FormatError as e:
    print(type(e).__name__, e)
""", timeout=120)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.startswith("MappedFileChanged") and str(path) in r.stdout, r.stdout


@pytest.mark.parametrize("how", ["kill", "foreign mapping"])
def test_other_sigbus_still_kills(model_file, tmp_path, how):
    other = tmp_path / "other.bin"
    other.write_bytes(b"x" * 65536)
    trigger = ("os.kill(os.getpid(), signal.SIGBUS)" if how == "kill" else
               f"mm = mmap.mmap(os.open({str(other)!r}, os.O_RDONLY), 0, prot=mmap.PROT_READ)\n"
               f"os.truncate({str(other)!r}, 0)\nprint(mm[40000])")
    r = run_python(f"""
import mmap, os, signal, nplm
m = nplm.Model({str(model_file)!r})
{trigger}
print("survived")
""", timeout=120)
    assert r.returncode == -signal.SIGBUS and "survived" not in r.stdout, (r.returncode, r.stderr[-2000:])


@pytest.mark.parametrize("kind", ["probing", "trie"])
@pytest.mark.parametrize("method", ["LAZY", "POPULATE_OR_READ"])
def test_truncating_a_mapped_kenlm_binary_raises(tmp_path, kind, method):
    """KenLM's binary files are guarded as nplm's are: reading a page that truncation
    cut off is MappedFileChanged naming the file, not SIGBUS.  (A model of several
    pages: within a file's last page, the bytes past its end read as zeros.)"""
    need_shared()
    path = tmp_path / f"m.{kind}.bin"
    nplm.build_binary(str(REFERENCE / "ptb5k.o3.arpa.xz"), str(path), kind)
    _truncate_while_loaded(path, method)


THREADED = """
import os, threading, nplm
path = {path!r}
cfg = nplm.Config(); cfg.load_method = nplm.LoadMethod.{method}; cfg.show_progress = False
other = nplm.Model({other!r}, cfg)
expected = other.score("the dog")
results, models = [], []
truncated = threading.Event()

def load():
    models.append(nplm.Model(path, cfg))

def score(m):
    truncated.wait()
    try:
        for _ in range(3):
            [m.score(s) for s in {sentences!r}]
            m.score_sentences({sentences!r} * 50, threads=2)
        results.append("no exception")
    except nplm.errors.MappedFileChanged as e:
        results.append(str(e))

if {load_in_thread!r}:
    t = threading.Thread(target=load); t.start(); t.join()
else:
    load()
m = models[0]
m.score("the dog")
workers = [threading.Thread(target=score, args=(m,)) for _ in range(4)]
for w in workers:
    w.start()
os.truncate(path, 100)
truncated.set()
for w in workers:
    w.join()
try:
    m.score("the dog")
    later = "no exception"
except nplm.errors.MappedFileChanged:
    later = "raised"
print(sorted(set(results)), later, other.score("the dog") == expected)
"""


@pytest.mark.parametrize("load_in_thread", [False, True], ids=["loaded-in-main", "loaded-in-thread"])
@pytest.mark.parametrize("kind", ["nplm", "probing", "trie"])
@pytest.mark.parametrize("method", ["LAZY", "POPULATE_OR_READ"])
def test_truncation_under_threads(tmp_path, kind, method, load_in_thread):
    """A model loaded in any thread and scored by four threads (each also with OpenMP
    threads) when its file is truncated: every scoring thread gets MappedFileChanged
    naming the file -- never SIGBUS, never the zeros read in the lost page's place --
    later calls too, and a model of another file scores on."""
    need_shared()
    path, other = tmp_path / f"m.{kind}", tmp_path / "other.nplm"
    nplm.build_binary(str(REFERENCE / "ptb5k.o3.arpa.xz"), str(path), kind)
    nplm.build_binary(str(TOY_ARPA), str(other))
    r = run_python(THREADED.format(path=str(path), other=str(other), method=method, sentences=SENTENCES,
                                   load_in_thread=load_in_thread), timeout=120)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.split("]")[0].count("truncated while it was loaded") == 1, r.stdout
    assert str(path) in r.stdout and "no exception" not in r.stdout and r.stdout.rstrip().endswith("raised True")
