"""Benchmark the ARPA reader and writer against KenLM's ARPA loading.

    python tools/bench_arpa.py [--copies 12] [--repeat 3]

Besides the reference ARPAs in ../shared/reference, it builds (once, under
$TMPDIR) a PTB-5-gram-sized ARPA (~4.5 M n-grams, ~130 MB) from ptb5k.o5 by adding
copies of its n-grams with the words permuted (see ``replicate``), since no lmplz
binary is at hand.  Times are best-of-``repeat`` wall seconds; the machine is shared, so
numbers are noisy.  Ratios are nplm / kenlm.Model (lower is better).
"""
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nplm import arpa  # noqa: E402
from nplm.backoff.arpa import read_arpa, write_arpa  # noqa: E402
from nplm.backoff.tables import NGramTables  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SPECIAL = ("<unk>", "<s>", "</s>")


def replicate(tables, copies, seed=0):
    """A bigger model over the same vocabulary: ``tables`` plus ``copies - 1``
    copies of its n-grams of order >= 2 with the ordinary words permuted at random
    (duplicates dropped).  The vocabulary stays small like a real model's, so the
    hash lookups see realistic cache behaviour."""
    rng = np.random.default_rng(seed)
    special = np.array([w in SPECIAL for w in tables.vocab])
    ordinary = np.flatnonzero(~special)
    remaps = []
    for c in range(copies):  # one word permutation per copy, the same for every order
        remap = np.arange(len(tables.vocab), dtype=np.int32)
        if c:
            remap[ordinary] = rng.permutation(ordinary).astype(np.int32)
        remaps.append(remap)
    ids, logprob, backoff = [tables.ids[0]], [tables.logprob[0]], [tables.backoff[0]]
    for k in range(1, tables.order):
        rows, lp, bo = [], [], []
        for remap in remaps:
            rows.append(remap[tables.ids[k]])
            lp.append(tables.logprob[k])
            bo.append(tables.backoff[k])
        rows = np.concatenate(rows)
        _, first = np.unique(rows, axis=0, return_index=True)
        first.sort()
        ids.append(np.ascontiguousarray(rows[first]))
        logprob.append(np.concatenate(lp)[first])
        backoff.append(np.concatenate(bo)[first])
    return NGramTables(vocab=list(tables.vocab), ids=ids, logprob=logprob, backoff=backoff)


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", type=int, default=14)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    try:
        import kenlm
    except ImportError:
        kenlm = None
    if not SHARED.is_dir():
        sys.exit(f"{SHARED} is absent")
    tmp = Path(tempfile.gettempdir()) / "nplm-bench-arpa"
    tmp.mkdir(exist_ok=True)
    plain = {}
    for name in ("ptb5k.o5", "wiki3k.o5"):
        out = tmp / f"{name}.arpa"
        if not out.exists():
            write_arpa(read_arpa(SHARED / "reference" / f"{name}.arpa.xz"), out)
        plain[name] = out
    big = tmp / f"ptb5k.o5.x{args.copies}.arpa"
    if not big.exists():
        write_arpa(replicate(read_arpa(plain["ptb5k.o5"]), args.copies), big)
    plain[big.stem] = big

    try:
        import nplm
        config = nplm.Config()
        config.show_progress = False
    except Exception:  # the query engine may not be built
        nplm = None
    print(f"{'file':<20}{'MB':>6}{'n-grams':>9}{'read':>7}{'read1':>7}{'write':>7}{'Model':>7}"
          f"{'kenlm':>7}{'read/k':>8}{'read1/k':>8}{'write/k':>8}{'Model/k':>8}")
    for name, path in plain.items():
        tables = read_arpa(path)
        arpa.SPLIT = True
        t_read = best(lambda: read_arpa(path), args.repeat)
        arpa.SPLIT = False
        t_read1 = best(lambda: read_arpa(path), args.repeat)
        arpa.SPLIT = None
        t_write = best(lambda: write_arpa(tables, tmp / "out.arpa"), args.repeat)
        t_model = best(lambda: nplm.Model(str(path), config), args.repeat) if nplm else float("nan")
        t_kenlm = best(lambda: kenlm.Model(str(path)), args.repeat) if kenlm else float("nan")
        mb = os.path.getsize(path) / 1e6
        print(f"{name:<20}{mb:6.1f}{sum(tables.counts):9d}{t_read:7.3f}{t_read1:7.3f}{t_write:7.3f}"
              f"{t_model:7.3f}{t_kenlm:7.3f}{t_read / t_kenlm:8.2f}{t_read1 / t_kenlm:8.2f}"
              f"{t_write / t_kenlm:8.2f}{t_model / t_kenlm:8.2f}")
    print("read = two-thread parsing forced on, read1 = one parsing thread, write = to a plain "
          "file (fsync'd), Model = nplm.Model load (read + the query engine's tables)")
    print(f"load average now: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    # compressed input: decompression dominates; compare with plain
    xz = SHARED / "reference" / "ptb5k.o5.arpa.xz"
    t_xz = best(lambda: read_arpa(xz), args.repeat)
    print(f"read ptb5k.o5.arpa.xz: {t_xz:.3f} s (decompression included)")
    os.unlink(tmp / "out.arpa")


if __name__ == "__main__":
    main()
