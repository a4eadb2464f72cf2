"""nplm build-binary against KenLM's build_binary writing the same KenLM file.

A 5-gram Kneser-Ney model of the full PTB train set (lmplz when available, else
nplm.estimate) becomes probing, trie, trie -q 8 -b 8 and trie -a 22 -q 8 -b 8 files,
once by each tool per round; the rounds interleave the two (best wall time of each
kept).  Both run as commands, as a user would run them (nplm's time includes starting
Python and importing the package, printed on its own); nplm's in-process time
(nplm.build_binary, no interpreter start) is printed too.  Every file nplm writes is
compared byte for byte with build_binary's.  The package's bytecode is compiled first
(as an installed package has it), so that no run compiles nplm's sources, which it
would do every time under PYTHONDONTWRITEBYTECODE.

    python tools/bench_build_binary.py [--repeat 3] [--build-binary PATH] [--json benchmarks/build_binary.json]
"""
import argparse
import compileall
import filecmp
import os
import subprocess
import sys
import time

from _bench_common import CACHE, ROOT, kenlm_program, kn_arpa, save_results

import nplm

LAYOUTS = {"probing": ["probing"], "trie": ["trie"], "trie -q 8 -b 8": ["-q", "8", "-b", "8", "trie"],
           "trie -a 22 -q 8 -b 8": ["-a", "22", "-q", "8", "-b", "8", "trie"]}
OPTIONS = {"probing": ("probing", {}), "trie": ("trie", {}),
           "trie -q 8 -b 8": ("trie", {"prob_bits": 8, "backoff_bits": 8}),
           "trie -a 22 -q 8 -b 8": ("trie", {"prob_bits": 8, "backoff_bits": 8, "pointer_bits": 22})}


def run_timed(argv):
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return time.perf_counter() - t


def bench_layout(name, arpa, build_binary, repeat):
    flags = LAYOUTS[name]
    theirs, ours = CACHE / "bb-kenlm.bin", CACHE / "bb-nplm.bin"
    kind, options = OPTIONS[name]
    best = {"build_binary": float("inf"), "nplm build-binary": float("inf"), "nplm.build_binary": float("inf")}
    for _ in range(repeat):
        best["build_binary"] = min(best["build_binary"], run_timed([build_binary, *flags, str(arpa), str(theirs)]))
        best["nplm build-binary"] = min(best["nplm build-binary"], run_timed(
            [sys.executable, "-m", "nplm", "build-binary", *flags, str(arpa), str(ours)]))
        t = time.perf_counter()
        nplm.build_binary(str(arpa), str(ours), kind, messages=None, **options)
        best["nplm.build_binary"] = min(best["nplm.build_binary"], time.perf_counter() - t)
    same = filecmp.cmp(theirs, ours, shallow=False)
    return best, os.path.getsize(theirs), os.path.getsize(ours), same


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--build-binary", default=kenlm_program("build_binary"))
    ap.add_argument("--json", help="also save the table here, for tools/docs_benchmarks.py")
    args = ap.parse_args()
    compileall.compile_dir(str(ROOT / "nplm"), quiet=1)
    arpa = kn_arpa(5)
    print(f"PTB KN5: {arpa} ({os.path.getsize(arpa) / 2**20:.1f} MiB ARPA); best of {args.repeat} "
          "interleaved rounds")
    startup = min(run_timed([sys.executable, "-m", "nplm", "--version"]) for _ in range(args.repeat))
    print(f"starting the nplm command (python -m nplm --version): {startup:.2f} s")
    print(f"{'layout':<22}{'build_binary s':>15}{'nplm cmd s':>12}{'ratio':>7}{'in-process s':>14}"
          f"{'KenLM MiB':>11}{'nplm MiB':>10}  bytes")
    rows = []
    for name in LAYOUTS:
        best, size_k, size_n, same = bench_layout(name, arpa, args.build_binary, args.repeat)
        ratio = best["build_binary"] / best["nplm build-binary"]
        print(f"{name:<22}{best['build_binary']:>15.2f}{best['nplm build-binary']:>12.2f}{ratio:>7.2f}"
              f"{best['nplm.build_binary']:>14.2f}{size_k / 2**20:>11.2f}{size_n / 2**20:>10.2f}  "
              f"{'identical' if same else 'DIFFERENT'}")
        rows.append([name, best["build_binary"], best["nplm build-binary"], ratio, best["nplm.build_binary"],
                     size_k / 2**20, "identical" if same else "DIFFERENT"])
    print("ratio = build_binary time / nplm command time (> 1: nplm is faster)")
    if args.json:
        save_results(args.json, "KenLM's binary files: nplm build-binary against KenLM's build_binary", [{
            "columns": ["layout", "build_binary (s)", "nplm build-binary (s)", "ratio", "nplm.build_binary (s)",
                        "file (MiB)", "nplm's file"],
            "rows": rows,
            "notes": (f"PTB KN5 ARPA ({os.path.getsize(arpa) / 2**20:.1f} MiB, lmplz) to each file; both tools as "
                      f"commands, best of {args.repeat} interleaved rounds; nplm's command time includes starting "
                      f"Python and importing nplm ({startup:.2f} s for `python -m nplm --version`), "
                      "nplm.build_binary is the same work in-process. Ratio: build_binary time / nplm command "
                      "time: above 1 means nplm is ahead.")}])


if __name__ == "__main__":
    main()
