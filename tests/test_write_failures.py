"""Temporary files and failing writes.

* SIGTERM during a write is handled as Ctrl-C is: the temporary file is removed and
  the process exits with status 143 (SIGTERM's default left it behind).
* Temporary files that killed writers left more than a day ago are removed by the
  next write into that directory; newer ones (a writer may still be running) stay.
* A write that fails for want of room (disk full, quota, file size limit) names
  the output file.
* An ARPA file too big for memory is a ModelLoadError naming the file and line,
  not a bare MemoryError.
"""
import gzip
import os
import signal
import subprocess
import sys
import time

import pytest
from _bounded import ROOT, run_python

from nplm.io.atomic import STALE_SECONDS, TMP_PREFIX, atomic_write


def _temps(d):
    return sorted(p for p in os.listdir(d) if p.startswith(TMP_PREFIX))


def test_sigterm_during_a_write_removes_the_temporary_file(tmp_path):
    out = tmp_path / "out.bin"
    code = f"""
import time
from nplm.io.atomic import atomic_write
with atomic_write({str(out)!r}) as f:
    f.write(b"partial")
    f.flush()
    print("writing", flush=True)
    time.sleep(60)
"""
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "writing"
    assert len(_temps(tmp_path)) == 1
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert _temps(tmp_path) == [] and not out.exists()


def test_sigterm_keeps_its_default_outside_writes(tmp_path):
    r = run_python(f"""
import signal
from nplm.io.atomic import atomic_write
with atomic_write({str(tmp_path / 'a')!r}) as f:
    assert signal.getsignal(signal.SIGTERM) != signal.SIG_DFL
    f.write(b"x")
assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
def mine(*a): pass
signal.signal(signal.SIGTERM, mine)
with atomic_write({str(tmp_path / 'b')!r}) as f:
    assert signal.getsignal(signal.SIGTERM) is mine     # a program's own handler is left alone
print("ok")
""")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_stale_temporary_files_are_removed_by_the_next_writer(tmp_path):
    old = tmp_path / (TMP_PREFIX + "0123456789ab-model.nplm")
    fresh = tmp_path / (TMP_PREFIX + "ba9876543210-model.nplm")
    other = tmp_path / "sub"
    other.mkdir()
    elsewhere = other / (TMP_PREFIX + "0123456789ab-x")
    for p in (old, fresh, elsewhere):
        p.write_bytes(b"left by a killed writer")
    past = time.time() - STALE_SECONDS - 3600
    for p in (old, elsewhere):
        os.utime(p, (past, past))
    with atomic_write(tmp_path / "new.bin") as f:
        f.write(b"new")
    assert not old.exists()
    assert fresh.exists() and elsewhere.exists()
    assert (tmp_path / "new.bin").read_bytes() == b"new"


@pytest.mark.parametrize("ext", ["", ".gz"])
def test_a_full_disk_names_the_output(tmp_path, ext):
    out = tmp_path / f"big.out{ext}"
    r = run_python(f"""
import os, resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
from nplm.io.atomic import text_output
try:
    with text_output({str(out)!r}) as f:
        f.write(os.urandom(4 << 20))
except OSError as e:
    print("error:", e.errno, e.filename)
""")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["error:", "27", str(out)]      # EFBIG, as ENOSPC would be
    assert _temps(tmp_path) == [] and not out.exists()


def test_a_compressed_arpa_too_big_for_memory(tmp_path):
    path = tmp_path / "big.arpa.gz"
    lines = 8_000_000
    header = (b"\\data\\\nngram 1=3\nngram 2=%d\n\n\\1-grams:\n-1\t<s>\t0\n-1\t</s>\n-1\ta\t0\n\n"
              b"\\2-grams:\n" % lines)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header)
        block = b"-1\ta a\n" * 100_000
        for _ in range(lines // 100_000):
            f.write(block)
        f.write(b"\n\\end\\\n")
    # the limit leaves 350 MiB above what importing nplm maps: the 8M bigrams need more
    r = run_python(f"""
import resource
import nplm
vm = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (vm + (350 << 20), vm + (350 << 20)))
cfg = nplm.Config(); cfg.show_progress = False; cfg.arpa_complain = nplm.ARPALoadComplain.NONE
try:
    nplm.Model({str(path)!r}, cfg)
    print("loaded")
except nplm.ModelLoadError as e:
    print("refused:", e)
""", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("refused:") and "memory" in r.stdout and str(path) in r.stdout, r.stdout
