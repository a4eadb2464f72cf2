"""Benchmark the ARPA reader and writer against KenLM's ARPA loading.

    python tools/bench_arpa.py [--copies 12] [--repeat 3]

Besides the reference ARPAs in ../shared/reference, it builds (once, under
$TMPDIR) a PTB-5-gram-sized ARPA (~4.5 M n-grams, ~150 MB) by writing the tables
of ptb5k.o5 several times over under renamed words, since no lmplz binary is at
hand.  Times are best-of-``repeat`` wall seconds; the machine is shared, so
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
from nplm.arpa import read_arpa, write_arpa  # noqa: E402
from nplm.tables import NGramTables  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SPECIAL = ("<unk>", "<s>", "</s>")


def replicate(tables, copies):
    """``copies`` disjoint copies of ``tables`` sharing only <unk>, <s>, </s>."""
    vocab = list(tables.vocab)
    special = np.array([w in SPECIAL for w in vocab])
    base_v = len(vocab)
    nonspecial = np.flatnonzero(~special)
    ids, logprob, backoff = [[] for _ in tables.ids], [[] for _ in tables.ids], [[] for _ in tables.ids]
    for c in range(copies):
        remap = np.arange(base_v, dtype=np.int32)
        if c:
            remap[nonspecial] = len(vocab) + np.arange(len(nonspecial), dtype=np.int32)
            vocab.extend(f"{vocab[i]}_{c}" for i in nonspecial)
        for k in range(tables.order):
            rows = tables.ids[k]
            keep = slice(None) if c == 0 else ~special[rows].all(axis=1)
            ids[k].append(remap[rows[keep]])
            logprob[k].append(tables.logprob[k][keep])
            backoff[k].append(tables.backoff[k][keep])
    return NGramTables(vocab=vocab, ids=[np.concatenate(x) for x in ids],
                       logprob=[np.concatenate(x) for x in logprob],
                       backoff=[np.concatenate(x) for x in backoff])


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--copies", type=int, default=12)
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

    print(f"{'file':<22}{'MB':>7}{'n-grams':>10}{'read s':>9}{'write s':>9}{'kenlm s':>9}"
          f"{'read/kenlm':>12}{'write/kenlm':>12}")
    for name, path in plain.items():
        tables = read_arpa(path)
        t_read = best(lambda: read_arpa(path), args.repeat)
        t_write = best(lambda: write_arpa(tables, tmp / "out.arpa"), args.repeat)
        t_kenlm = best(lambda: kenlm.Model(str(path)), args.repeat) if kenlm else float("nan")
        mb = os.path.getsize(path) / 1e6
        print(f"{name:<22}{mb:7.1f}{sum(tables.counts):10d}{t_read:9.3f}{t_write:9.3f}{t_kenlm:9.3f}"
              f"{t_read / t_kenlm:12.2f}{t_write / t_kenlm:12.2f}")
    # compressed input: decompression dominates; compare with plain
    xz = SHARED / "reference" / "ptb5k.o5.arpa.xz"
    t_xz = best(lambda: read_arpa(xz), args.repeat)
    print(f"read ptb5k.o5.arpa.xz: {t_xz:.3f} s (decompression included)")
    os.unlink(tmp / "out.arpa")


if __name__ == "__main__":
    main()
