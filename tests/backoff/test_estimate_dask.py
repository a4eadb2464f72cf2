"""The Kneser-Ney estimation on a Dask cluster (a LocalCluster of 2 worker
processes): the inputs cut into shards, the ARPA byte-identical to lmplz's."""
import lzma
import subprocess
import sys
import time

import pytest

from nplm.backoff.estimate import distributed, estimate

pytest.importorskip("dask.distributed")

from helpers import REFERENCE, ROOT, need_reference

CASES = [
    ("ptb5k.o3", "ptb5k.txt", 3, {}),
    ("ptb5k.o4.prune011", "ptb5k.txt", 4, {"prune": [0, 1, 1]}),
    ("ptb5k.o3.nointerp-unigrams", "ptb5k.txt", 3, {"interpolate_unigrams": False}),
    ("wiki3k.o5", "wiki3k.txt", 5, {}),
    ("tiny200.o4.discount-fallback", "tiny200.txt", 4, {"discount_fallback": True}),
]


@pytest.fixture(scope="module")
def cluster():
    from dask.distributed import LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    from dask.distributed import Client
    with Client(cluster) as c:
        yield c


def reference(name):
    with lzma.open(REFERENCE / f"{name}.arpa.xz", "rb") as f:
        return f.read()


def shard_files(tmp_path, text, n):
    """The text as n files of consecutive lines, the second compressed."""
    lines = (REFERENCE / text).read_bytes().splitlines(keepends=True)
    paths = []
    for i in range(n):
        part = b"".join(lines[i * len(lines) // n:(i + 1) * len(lines) // n])
        path = tmp_path / (f"shard{i}.txt.xz" if i == 1 else f"shard{i}.txt")
        if i == 1:
            with lzma.open(path, "wb") as f:
                f.write(part)
        else:
            path.write_bytes(part)
        paths.append(str(path))
    return paths


@pytest.mark.parametrize("name,text,order,options", CASES, ids=[c[0] for c in CASES])
def test_dask_shards_give_lmplz_bytes(name, text, order, options, client, tmp_path):
    need_reference()
    out = tmp_path / "model.arpa"
    estimate(shard_files(tmp_path, text, 3), order, arpa=out, client=client, progress=False, **options)
    assert out.read_bytes() == reference(name)


def test_dask_cuts_a_plain_file_into_byte_ranges(client, tmp_path, monkeypatch):
    need_reference()
    monkeypatch.setattr(distributed, "SHARD_BYTES", 50_000)
    ranges = distributed.shard_ranges([str(REFERENCE / "ptb5k.txt")], distributed.SHARD_BYTES)
    assert len(ranges) > 5
    out = tmp_path / "model.arpa"
    estimate(str(REFERENCE / "ptb5k.txt"), 5, arpa=out, client=client, progress=False)
    assert out.read_bytes() == reference("ptb5k.o5")


def test_cli_scheduler(cluster, tmp_path):
    need_reference()
    out = tmp_path / "model.arpa"
    subprocess.run([sys.executable, "-m", "nplm", "estimate", "-o", "3", "--text",
                    *shard_files(tmp_path, "ptb5k.txt", 2), "--arpa", str(out), "-q",
                    "--scheduler", cluster.scheduler_address], cwd=ROOT, check=True)
    assert out.read_bytes() == reference("ptb5k.o3")


KILLED_RUN = """
import os, signal, sys, threading, time
from dask.distributed import Client, LocalCluster
from nplm.backoff.estimate import estimate
from nplm.backoff.estimate.distributed import ClusterError

def run(text, out, fraction, seconds):
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \\
            Client(cl) as client:
        pid = sorted(client.run(os.getpid).values())[0]
        def kill():
            time.sleep(fraction * seconds)
            os.kill(pid, signal.SIGKILL)
        threading.Thread(target=kill, daemon=True).start()
        try:
            estimate(text, 5, arpa=out, client=client, progress=False, discount_fallback=True)
            print("written")
        except ClusterError as e:
            print("refused:", e)

if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))
"""


@pytest.mark.parametrize("fraction", [0.15, 0.4, 0.65, 0.9])
def test_a_worker_killed_mid_run(fraction, tmp_path):
    """A worker process SIGKILLed at a point of the run (a fraction of the run's own
    time): its tasks are recomputed and the ARPA is the one-machine ARPA, or the run
    ends with one ClusterError line; never a hang, a raw Dask traceback or a wrong file."""
    text = str(REFERENCE.parent / "data" / "ptb" / "ptb.train.txt")
    need_reference()
    expected = tmp_path / "one-machine.arpa"
    began = time.perf_counter()
    estimate(text, 5, arpa=expected, progress=False, discount_fallback=True)
    seconds = 2 * (time.perf_counter() - began)      # the cluster's run takes about twice as long
    script = tmp_path / "killed_run.py"
    script.write_text(KILLED_RUN)
    out = tmp_path / "cluster.arpa"
    r = subprocess.run([sys.executable, str(script), text, str(out), str(fraction), str(seconds)],
                       capture_output=True, text=True, cwd=ROOT, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    if r.stdout.startswith("written"):
        assert out.read_bytes() == expected.read_bytes()
    else:
        assert r.stdout.startswith("refused: the Dask cluster lost work") and len(r.stdout.splitlines()) == 1
        assert not out.exists()
