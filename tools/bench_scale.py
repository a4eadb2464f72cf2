"""Kneser-Ney estimation at scale: nplm within a memory budget against lmplz.

Corpora of 20M, 100M and 300M words are built reproducibly from the shared PTB and
WikiText-2 training texts: the sentences are repeated, and in every copy after the
first the words of a fixed random share of the rarer types are renamed (``word``
-> ``word~c<copy>``), so that each copy adds new n-grams as fresh text would.  The
share is the same set of types in every copy: an n-gram holding one of them is new
in each copy, and one without them repeats in every copy (count >= the number of
copies), so the counts-of-counts 1-4 that the discounts use stay those of natural
text (renaming a different random set in each copy spreads repeated n-grams over
counts 2-4 and lmplz's 5-gram discounts go out of range).  For
each size, in one run: lmplz -S SIZE, nplm -S SIZE (and, with --dask, nplm on a
LocalCluster of 2 workers): wall time, peak resident memory of the process, peak
temporary disk, and whether the ARPA files are identical.  Each ARPA is hashed as soon
as it is written and then deleted, so that the 300M-word run needs room for one ARPA
(about 30 GB) and the temporary files, not two ARPAs.

    python tools/bench_scale.py --words 20M --memory 2G [--dask]

The machine is shared: run the sizes you compare in one invocation.
"""
import argparse
import collections
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nplm.backoff.estimate.config import parse_size  # noqa: E402
from tools._bench_common import SHARED, lmplz_path  # noqa: E402

RARE_FROM = 1000        # word types outside the most frequent 1000 may be renamed
RENAME_SHARE = 0.9      # share of those types renamed in every copy


def base_sentences():
    ptb = (SHARED / "data" / "ptb" / "ptb.train.txt").read_text(encoding="utf-8").splitlines()
    wiki = (SHARED / "data" / "wikitext2" / "wiki.train.tokens").read_text(encoding="utf-8").splitlines()
    lines = [line.strip() for line in ptb + wiki]
    return [line.replace("<unk>", "UNK") for line in lines if line and not line.startswith("=")]


def build_corpus(path, words, seed=1):
    """Write about ``words`` words of text to ``path`` (see the module's doc)."""
    sentences = [s.split() for s in base_sentences()]
    freq = collections.Counter(w for s in sentences for w in s)
    rare = sorted(w for w, _ in freq.most_common()[RARE_FROM:])
    renamed = set(random.Random(seed).sample(rare, int(len(rare) * RENAME_SHARE)))
    written, copy = 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < words:
            for s in sentences:
                if written >= words:
                    break
                if copy:
                    s = [f"{w}~c{copy}" if w in renamed else w for w in s]
                f.write(" ".join(s) + "\n")
                written += len(s)
            copy += 1
    return written


def folder_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def measured(cmd, temp, stdin=None):
    """Run ``cmd``: (wall s, CPU s, peak RSS bytes, peak bytes under ``temp``)."""
    peak_disk = [0]
    done = threading.Event()

    def watch():
        while not done.wait(0.2):
            peak_disk[0] = max(peak_disk[0], folder_bytes(temp))
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode("utf-8", "replace")
    proc.returncode = os.waitstatus_to_exitcode(status)
    done.set()
    watcher.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}):\n{err[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, peak_disk[0]


def run_lmplz(corpus, order, memory, work):
    out, temp = work / "lmplz.arpa", work / "lmplz-temp"
    temp.mkdir(exist_ok=True)
    with open(corpus, "rb") as f:
        cmd = [lmplz_path(), "-o", str(order), "-S", memory, "-T", str(temp) + "/", "--arpa", str(out)]
        return out, measured(cmd, temp, stdin=f)


def run_nplm(corpus, order, memory, work, scheduler=None, tag="nplm"):
    out, temp = work / f"{tag}.arpa", work / f"{tag}-temp"
    temp.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "nplm", "estimate", "-o", str(order), "--text", str(corpus),
           "--arpa", str(out), "-S", memory, "-T", str(temp), "-q"]
    if scheduler:
        cmd += ["--scheduler", scheduler]
    return out, measured(cmd, temp)


def digest_and_delete(path):
    """SHA-256 of ``path``, which is then removed (two 30 GB ARPAs do not fit beside each other)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    path.unlink()
    return h.hexdigest()


def row(name, measures, identical, memory):
    wall, cpu, rss, disk = measures
    budget = parse_size(memory)
    print(f"{name:14s} wall {wall:8.1f} s  CPU {cpu:8.1f} s  peak RSS {rss / 2**30:6.2f} GiB "
          f"({rss / budget:5.2f} of -S)  temp disk {disk / 2**30:6.2f} GiB  identical {identical}",
          flush=True)


def bench(words, order, memory, work, dask_cluster, extra_memory=(), reuse_lmplz=False):
    corpus = work / f"corpus.{words}.txt"
    if not corpus.exists():
        n = build_corpus(corpus, words)
        print(f"built {corpus} ({n} words, {corpus.stat().st_size / 2**20:.0f} MiB)", flush=True)
    ref = work / f"lmplz.{words}.o{order}"
    saved = ref.with_suffix(ref.suffix + ".sha256")
    if not (reuse_lmplz and saved.exists()):
        out, measures = run_lmplz(corpus, order, memory, work)
        row("lmplz", measures, "-", memory)
        want, lw = digest_and_delete(out), measures[0]
        saved.write_text(f"{want} {lw}")
    else:
        want, lw = saved.read_text().split()
        lw = float(lw)
        print(f"lmplz          (its ARPA's digest and wall {lw:.1f} s from an earlier run)", flush=True)
    out, measures = run_nplm(corpus, order, memory, work)
    row("nplm", measures, digest_and_delete(out) == want, memory)
    nw = measures[0]
    print(f"{'':14s} nplm/lmplz wall {nw / lw:.2f}", flush=True)
    for m in extra_memory:      # budgets below what the counts need: spilled, part by part
        out, measures = run_nplm(corpus, order, m, work, tag=f"nplm-{m}")
        row(f"nplm -S {m}", measures, digest_and_delete(out) == want, m)
    if dask_cluster is not None:
        out, measures = run_nplm(corpus, order, memory, work, dask_cluster.scheduler_address, "dask")
        row("nplm dask", measures, digest_and_delete(out) == want, memory)
        print(f"{'':14s} dask/nplm wall {measures[0] / nw:.2f} (client process RSS and CPU only)",
              flush=True)


def word_count(size):
    """20M -> 20,000,000 (decimal: words, not bytes)."""
    scale = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9}.get(size[-1].lower())
    return int(float(size[:-1]) * scale) if scale else int(size)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--words", nargs="+", default=["20M"], help="corpus sizes (20M 100M 300M)")
    p.add_argument("--order", type=int, default=5)
    p.add_argument("--memory", default="2G", help="-S for both tools")
    p.add_argument("--work", help="folder for corpora, outputs and temporary files")
    p.add_argument("--dask", action="store_true", help="also nplm on a 2-worker LocalCluster")
    p.add_argument("--reuse-lmplz", action="store_true",
                   help="reuse lmplz's ARPA digest and wall time saved in --work by an earlier run")
    p.add_argument("--extra-memory", nargs="*", default=[], metavar="SIZE",
                   help="also nplm with these smaller -S (forcing it to spill)")
    args = p.parse_args()
    if lmplz_path() is None:
        sys.exit("lmplz is not built (/opt/kenlm-src/build/bin/lmplz)")
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    cluster = None
    if args.dask:
        from dask.distributed import LocalCluster
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True)
    try:
        for size in args.words:
            words = word_count(size)
            print(f"== {words} words, order {args.order}, -S {args.memory} ==", flush=True)
            bench(words, args.order, args.memory, work, cluster, args.extra_memory, args.reuse_lmplz)
    finally:
        if cluster is not None:
            cluster.close()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
