"""Pruning benchmark on PTB: test perplexity (by the real kenlm module) against size for
count pruning (lmplz's --prune, as nplm estimate --prune computes it byte for byte),
relative-entropy pruning of KN5 (nplm prune), pruning measured against a teacher
(nplm prune --reference: a mixture of KN5 and a network), and distillation of that
teacher to the same sizes (nplm distil --target-size); a plot (matplotlib) and a
Markdown table.

    python tools/bench_prune.py --work /tmp/pb                      # count + entropy curves
    python tools/bench_prune.py --work /tmp/pb --teacher mix.json --distil 0.25 \\
        --headline --plot docs/guide/prune.png

KN5 is ``nplm estimate -o 5`` of PTB train (<unk> the unknown word; 2,307,233 n-grams of
orders >= 2, test 141.19); sizes are n-grams of orders >= 2, as fractions of KN5's.
Every command runs in its own process, as a user runs it (wall time and the tool's
own pruning time are printed); results are kept in WORK/results.json, so a later run
adds rows without redoing the others.  ``--headline`` runs the one documented command
(the teacher distilled to 25% of KN5, written as KenLM's trie -q 8 -b 8) and reports
the perplexity kenlm gives the file.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PTB = ROOT.parent / "shared" / "data" / "ptb"
NPLM = [sys.executable, "-m", "nplm"]
COUNT_PRUNE = ["0 0 0 1", "0 0 1", "0 1", "0 1 2", "0 1 2 3", "0 2 3 4", "0 3 5 8", "0 6 10 16"]
SIZES = [0.75, 0.5, 0.25, 0.15, 0.1, 0.05]
HEADLINE = 0.25


def run(args, log):
    """Run ``nplm ARGS`` in its own process; (wall time in s, its stderr)."""
    t = time.perf_counter()
    r = subprocess.run(NPLM + [str(a) for a in args], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if r.returncode:
        sys.exit(f"nplm {' '.join(map(str, args))} failed:\n{r.stderr[-3000:]}")
    log.write(f"$ nplm {' '.join(map(str, args))}\n{r.stderr}\n")
    log.flush()
    return time.perf_counter() - t, r.stderr


def test_perplexity(path):
    import kenlm
    config = kenlm.Config()
    config.show_progress = False
    config.arpa_complain = kenlm.ARPALoadComplain.NONE
    m = kenlm.Model(str(path), config)
    lines = (PTB / "ptb.test.txt").read_text().splitlines()
    total = sum(m.score(line) for line in lines)
    return 10.0 ** (-total / sum(len(line.split()) + 1 for line in lines))


def binary_ngrams(stderr):
    """N-grams of orders >= 2 of a binary output, from what nplm prune or distil prints."""
    m = re.search(r"orders >= 2: (\d+)", stderr)
    if m:
        return int(m.group(1))
    counts = re.search(r"n-grams: ((?:\d+=\d+ ?)+)", stderr).group(1).split()
    return sum(int(c.split("=")[1]) for c in counts[1:])


def ngrams(path):
    from nplm.io.resources import arpa_header_counts
    return sum(arpa_header_counts(str(path))[1:])


class Bench:
    def __init__(self, work):
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.file = self.work / "results.json"
        self.results = json.loads(self.file.read_text()) if self.file.exists() else {}
        self.log = open(self.work / "commands.log", "a")
        self.kn5 = self.work / "kn5.arpa"
        if not self.kn5.exists():
            run(["estimate", "-o", 5, "--text", PTB / "ptb.train.txt", "--arpa", self.kn5, "--quiet"], self.log)
        self.kn5_size = ngrams(self.kn5)

    def row(self, method, label, out, args):
        """Run ``args`` (writing ``out``) unless the row is known; record it.  The size
        of a binary output is what nplm prune prints."""
        key = f"{method} {label}"
        if key not in self.results:
            wall, err = run(args, self.log)
            size = ngrams(out) if out.suffix == ".arpa" else binary_ngrams(err)
            self.results[key] = dict(method=method, label=label, ngrams=size, ppl=test_perplexity(out),
                                     wall_s=round(wall, 1), bytes=out.stat().st_size)
            self.file.write_text(json.dumps(self.results, indent=1))
            out.unlink()
        r = self.results[key]
        print(f"{method:>10} {label:>14}: {r['ngrams']:>9,} n-grams ({r['ngrams'] / self.kn5_size:6.1%}), "
              f"test {r['ppl']:7.2f}, {r['wall_s']:6.1f} s", flush=True)
        return r

    def target(self, fraction):
        return int(fraction * self.kn5_size)

    def count_curve(self):
        for t in COUNT_PRUNE:
            out = self.work / "count.arpa"
            self.row("count", t, out, ["estimate", "-o", 5, "--text", PTB / "ptb.train.txt", "--prune", *t.split(),
                                       "--arpa", out, "--quiet"])

    def entropy_curve(self, sizes):
        for f in sizes:
            out = self.work / "entropy.arpa"
            self.row("entropy", f"{f:g}", out, ["prune", self.kn5, out, "--target-size", self.target(f), "--quiet"])

    def teacher_curve(self, teacher, sizes):
        for f in sizes:
            out = self.work / "teacher.arpa"
            self.row("teacher", f"{f:g}", out, ["prune", self.kn5, out, "--target-size", self.target(f),
                                                 "--reference", teacher, "--quiet"])

    def distil_curve(self, teacher, sizes):
        for f in sizes:
            out = self.work / "distil.arpa"
            self.row("distil", f"{f:g}", out, ["distil", teacher, "--text", PTB / "ptb.train.txt", "--order", 5,
                                                "--target-size", self.target(f), "--arpa", out, "--quiet"])

    def headline(self, teacher):
        """The one documented command: the teacher distilled to 25% of KN5's n-grams
        (its default pool sampled from the teacher's networks), written as KenLM's
        trie -q 8 -b 8."""
        out = self.work / "headline.trie"
        cmd = ["distil", teacher, "--text", PTB / "ptb.train.txt", "--order", 5, "--target-size",
               self.target(HEADLINE), "--arpa", out, "--type", "trie", "--prob-bits", 8, "--backoff-bits", 8]
        print("command: nplm " + " ".join(map(str, cmd)))
        return self.row("headline", "trie -q 8 -b 8", out, cmd)


def table(results, kn5_size, kn5_ppl):
    print("\n| method | setting | n-grams (orders >= 2) | of KN5 | test ppl | wall |")
    print("|---|---|---:|---:|---:|---:|")
    print(f"| KN5 | `nplm estimate -o 5` | {kn5_size:,} | 100% | {kn5_ppl:.2f} | |")
    for r in sorted(results.values(), key=lambda r: (r["method"], -r["ngrams"])):
        print(f"| {r['method']} | {r['label']} | {r['ngrams']:,} | {r['ngrams'] / kn5_size:.1%} | "
              f"{r['ppl']:.2f} | {r['wall_s']:.0f} s |")


def plot(results, kn5_size, kn5_ppl, path, note):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.4))
    names = {"count": "count pruning (lmplz --prune)", "entropy": "entropy pruning of KN5 (nplm prune)",
             "teacher": "pruning against KN5+networks (nplm prune --reference)",
             "distil": "distilled KN5+network (nplm distil --target-size)",
             "headline": "the one command: distil to 25%, KenLM trie -q 8 -b 8"}
    marks = {"count": "s-", "entropy": "o-", "teacher": "^-", "distil": "D-", "headline": "*"}
    for method, name in names.items():
        rows = sorted((r for r in results.values() if r["method"] == method), key=lambda r: r["ngrams"])
        if rows:
            ax.plot([r["ngrams"] for r in rows], [r["ppl"] for r in rows], marks[method], label=name,
                    markersize=10 if method == "headline" else 5)
    ax.axhline(kn5_ppl, color="grey", lw=0.8, ls="--")
    ax.axvline(HEADLINE * kn5_size, color="grey", lw=0.8, ls=":")
    ax.plot([kn5_size], [kn5_ppl], "kx", label=f"KN5 ({kn5_ppl:.2f})")
    ax.set_xscale("log")
    ax.set_xlabel("n-grams of orders >= 2 (dotted: 25% of KN5)")
    ax.set_ylabel("PTB test perplexity (kenlm)")
    ax.set_title(note, fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="folder for KN5, the outputs and results.json")
    ap.add_argument("--teacher", help="the teacher for --reference and distil (e.g. KN5 + a network, tuned)")
    ap.add_argument("--sizes", type=float, nargs="+", default=SIZES, help="fractions of KN5's n-grams")
    ap.add_argument("--distil", type=float, nargs="*", default=[], help="fractions for nplm distil")
    ap.add_argument("--skip", nargs="*", default=[], choices=["count", "entropy", "teacher"])
    ap.add_argument("--headline", action="store_true")
    ap.add_argument("--plot", help="write the plot here (PNG)")
    ap.add_argument("--note", default="", help="the plot's title (date, commit, command)")
    args = ap.parse_args()
    b = Bench(args.work)
    kn5_ppl = test_perplexity(b.kn5)
    print(f"KN5: {b.kn5_size:,} n-grams, test {kn5_ppl:.2f}")
    if "count" not in args.skip:
        b.count_curve()
    if "entropy" not in args.skip:
        b.entropy_curve(args.sizes)
    if args.teacher and "teacher" not in args.skip:
        b.teacher_curve(args.teacher, args.sizes)
    if args.teacher and args.distil:
        b.distil_curve(args.teacher, args.distil)
    if args.teacher and args.headline:
        b.headline(args.teacher)
    table(b.results, b.kn5_size, kn5_ppl)
    if args.plot:
        plot(b.results, b.kn5_size, kn5_ppl, args.plot, args.note)


if __name__ == "__main__":
    main()
