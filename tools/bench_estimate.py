"""Benchmark ``nplm estimate`` (modified Kneser-Ney) against KenLM's lmplz.

For PTB train and WikiText-2 train (``<unk>`` written as ``UNK``, since lmplz refuses
``<unk>``; WikiText-2 without its blank lines, as in ../shared/reference), orders 3 and
5: process wall time (best of --repeat runs, interpreter start included, ARPA written
to a temporary file), CPU time (user + sys, less sensitive to a busy machine) and
peak resident memory of the estimating process, nplm and lmplz runs interleaved.  lmplz runs
the same way when it is installed (env NPLM_LMPLZ or PATH); otherwise figures
of lmplz measured earlier on a 2-core machine are used as the reference.  Finally
the PTB 5-gram's test perplexity by the real ``kenlm`` module, to compare with
lmplz's model (141.186 by KenLM's query).

    python tools/bench_estimate.py [--repeat 3] [--orders 3 5]

The machine is shared: run it when nothing else is compiling, and expect noise.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import CACHE, ROOT, SHARED, lmplz_path, save_results  # noqa: E402

# lmplz -o 5 -S 1G on full PTB train, measured earlier on a 2-core machine
LMPLZ_PTB5_WALL = (1.6, 2.2)       # seconds
LMPLZ_PTB5_RSS = (230, 420)        # MB, depending on -S
LMPLZ_PTB5_PPL = 141.186

_NPLM = """
import sys
from nplm.backoff.kneser_ney import estimate
estimate(sys.argv[1], int(sys.argv[2]), arpa=sys.argv[3], progress=False)
"""


def corpus(name):
    """The benchmark corpora, prepared once into the bench cache."""
    CACHE.mkdir(parents=True, exist_ok=True)
    if name == "ptb":
        out = CACHE / "ptb.train.UNK.txt"
        if not out.exists():
            text = (SHARED / "data" / "ptb" / "ptb.train.txt").read_text(encoding="utf-8")
            out.write_text(text.replace("<unk>", "UNK"), encoding="utf-8")
    else:
        out = CACHE / "wiki2.train.UNK.nonblank.txt"
        if not out.exists():
            lines = (SHARED / "data" / "wikitext2" / "wiki.train.tokens").read_text(encoding="utf-8").splitlines()
            out.write_text("".join(line.replace("<unk>", "UNK") + "\n" for line in lines if line.strip()),
                           encoding="utf-8")
    return out


def run_measured(cmd, stdin=None, stdout=None):
    """(wall seconds, peak RSS in MB, CPU seconds user+sys) of one process."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdin=stdin, stdout=stdout or subprocess.DEVNULL, stderr=subprocess.PIPE,
                         cwd=ROOT)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if p.returncode:
        raise SystemExit(f"{cmd[0]} failed ({p.returncode}):\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024.0, usage.ru_utime + usage.ru_stime


def best(runs):
    """Fastest wall and CPU time, largest peak memory."""
    return min(r[0] for r in runs), max(r[1] for r in runs), min(r[2] for r in runs)


def nplm_run(text, order, arpa):
    return run_measured([sys.executable, "-c", _NPLM, str(text), str(order), str(arpa)])


def lmplz_run(lmplz, text, order, arpa):
    with open(text, "rb") as f, open(arpa, "wb") as g:
        return run_measured([lmplz, "-o", str(order), "-S", "1G"], stdin=f, stdout=g)


def perplexity(arpa, test_lines):
    import kenlm
    model = kenlm.Model(str(arpa))
    total, tokens = 0.0, 0
    for line in test_lines:
        total += model.score(line, bos=True, eos=True)
        tokens += len(line.split()) + 1
    return 10.0 ** (-total / tokens), tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--orders", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--corpora", nargs="+", default=["ptb", "wiki2"], choices=["ptb", "wiki2"])
    ap.add_argument("--json", help="also save the table here, for tools/docs_benchmarks.py")
    args = ap.parse_args()
    if not SHARED.is_dir():
        raise SystemExit("../shared (corpora) is absent")
    lmplz = lmplz_path()
    print(f"lmplz: {lmplz or 'not installed; reference figures from this machine are used'}")
    print(f"{'corpus':8} {'order':>5} {'nplm s':>7} {'cpu s':>6} {'MB':>5} {'lmplz s':>9} {'cpu s':>6}"
          f" {'MB':>9} {'wall ratio':>11} {'cpu ratio':>9} {'mem ratio':>10}")
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        ptb5 = None
        for name in args.corpora:
            text = corpus(name)
            for order in args.orders:
                arpa = Path(tmp) / f"{name}.o{order}.arpa"
                ours, theirs = [], []
                for _ in range(args.repeat):   # interleaved: both see the same load
                    ours.append(nplm_run(text, order, arpa))
                    if lmplz:
                        theirs.append(lmplz_run(lmplz, text, order, Path(tmp) / "lmplz.arpa"))
                wall, rss, cpu = best(ours)
                if name == "ptb" and order == 5:
                    ptb5 = arpa
                ratio_c = "-"
                if lmplz:
                    lw, lr, lc = best(theirs)
                    ref_t, ref_c, ref_m = f"{lw:.2f}", f"{lc:.2f}", f"{lr:.0f}"
                    ratio_t, ratio_m, ratio_c = f"{wall / lw:.2f}x", f"{rss / lr:.2f}x", f"{cpu / lc:.2f}x"
                elif name == "ptb" and order == 5:
                    lo, hi = LMPLZ_PTB5_WALL
                    mlo, mhi = LMPLZ_PTB5_RSS
                    ref_t, ref_c, ref_m = f"{lo}-{hi}", "-", f"{mlo}-{mhi}"
                    ratio_t = f"{wall / hi:.2f}-{wall / lo:.2f}x"
                    ratio_m = f"{rss / mhi:.2f}-{rss / mlo:.2f}x"
                else:
                    ref_t = ref_c = ref_m = ratio_t = ratio_m = "-"
                print(f"{name:8} {order:>5} {wall:7.2f} {cpu:6.2f} {rss:5.0f} {ref_t:>9} {ref_c:>6} {ref_m:>9}"
                      f" {ratio_t:>11} {ratio_c:>9} {ratio_m:>10}", flush=True)
                table.append([name, order, wall, cpu, rss, ref_t, ref_c, ref_m, ratio_t, ratio_c, ratio_m])
        if args.json:
            save_results(args.json, "Kneser-Ney estimation against lmplz", [{
                "columns": ["corpus", "order", "nplm wall s", "nplm CPU s", "nplm peak MB", "lmplz wall s",
                            "lmplz CPU s", "lmplz peak MB", "wall nplm/lmplz", "CPU nplm/lmplz",
                            "memory nplm/lmplz"],
                "rows": table,
                "notes": (f"Best of {args.repeat} interleaved runs each, interpreter start included; "
                          "below 1 means nplm is ahead. lmplz runs with -S 1G.")}])
        if ptb5 is not None:
            try:
                import kenlm  # noqa: F401
            except ImportError:
                print("kenlm module not installed: perplexity skipped")
                return
            test = (SHARED / "data" / "ptb" / "ptb.test.txt").read_text(encoding="utf-8")
            lines = [line.strip().replace("<unk>", "UNK") for line in test.splitlines()]
            ppl, tokens = perplexity(ptb5, lines)
            print(f"PTB test perplexity of nplm's 5-gram (kenlm module, {tokens} tokens): {ppl:.3f}; "
                  f"lmplz's model: {LMPLZ_PTB5_PPL} (ratio {ppl / LMPLZ_PTB5_PPL:.6f})")


if __name__ == "__main__":
    main()
