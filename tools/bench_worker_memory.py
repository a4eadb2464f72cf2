"""Memory of a worker process that scores with one KenLM binary: the RSS that
``import nplm`` + loading the file + scoring PTB test adds to a fresh interpreter,
against the same with the real kenlm module, for KenLM's probing and trie files of
PTB KN5 (built by KenLM's build_binary where one is built, else by nplm,
whose files are the same bytes).  Each measurement is a fresh process; the best
(lowest) of --repeat rounds is kept.

    python tools/bench_worker_memory.py [--repeat 3]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nplm

ROOT = Path(__file__).resolve().parents[1]
PTB = ROOT.parent / "shared" / "data" / "ptb"
sys.path.insert(0, str(ROOT / "tests"))
from _bench_common import kenlm_program  # noqa: E402
from test_worker_memory import MEASURE  # noqa: E402 (the measurement the test makes)


def measure(module, model):
    r = subprocess.run([sys.executable, "-c", MEASURE, module, model, str(PTB / "ptb.test.txt")],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])["added_mb"]


def build(arpa, out, layout):
    build_binary = kenlm_program("build_binary")
    if build_binary:
        subprocess.run([build_binary, "-s", layout, arpa, out], check=True,
                       capture_output=True)
    else:
        nplm.build_binary(arpa, out, layout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        arpa = os.path.join(tmp, "kn5.arpa")
        nplm.estimate(str(PTB / "ptb.train.txt"), 5, arpa=arpa, progress=False)
        print("| file | size | kenlm adds | nplm adds | ratio |\n|---|---:|---:|---:|---:|")
        for layout in ("probing", "trie"):
            path = os.path.join(tmp, f"kn5.{layout}")
            build(arpa, path, layout)
            best = {"kenlm": float("inf"), "nplm": float("inf")}
            for _ in range(args.repeat):
                for module in best:
                    best[module] = min(best[module], measure(module, path))
            print(f"| PTB KN5 {layout} | {os.path.getsize(path) / 2**20:.1f} MiB | {best['kenlm']:.1f} MB | "
                  f"{best['nplm']:.1f} MB | {best['nplm'] / best['kenlm']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
