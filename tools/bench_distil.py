"""Distillation benchmark on PTB: size and test perplexity (by the real kenlm module)
of back-off tables distilled from one or more teachers, next to KN5 itself, at KN5's
size and at half of it (relative-entropy pruning); optionally neural models at
float32/float16/int8; and a plot of perplexity against size (matplotlib, optional).

    python tools/bench_distil.py                                   # teacher: KN5 itself
    python tools/bench_distil.py --teacher neural.nplm --teacher interp.json \\
        --neural neural.nplm --top-k 5 --plot distil.png
    nplm sample vnnlm.nplm --tokens 20000000 --out s.txt && sed -i 's/<unk>/UNK/g' s.txt
    python tools/bench_distil.py --teacher kn5+vnnlm.json --sample-text s.txt --continuation 1
    python tools/bench_distil.py --one-command mix.json --quality fast default best

``--one-command SPEC`` runs the plain ``nplm distil SPEC --text train --order 5 --arpa
OUT --quality Q`` (each in its own process) for a mixture of KN5 and networks tuned
on PTB valid, and reports test perplexity by the real kenlm module, size relative to
KN5, wall time and the process's peak RSS.

Every teacher is anything ``nplm.Model`` loads.  Sizes: n-grams (orders >= 2), the
ARPA file and the nplm binary in MB (1e6 bytes); the plot uses the binary's size.
The reference row (KN5, nplm.estimate = lmplz) is computed in the same run.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_common import kn_arpa, ptb_lines, ptb_train_unk  # noqa: E402


def kenlm_ppl(arpa_path, lines):
    import kenlm
    m = kenlm.Model(str(arpa_path))
    total = sum(m.score(line) for line in lines)
    n = sum(len(line.split()) + 1 for line in lines)
    return 10.0 ** (-total / n), n


def sizes(arpa_path, workdir):
    from nplm.backoff import arpa
    from nplm.backoff import binary as backoff
    t = arpa.read_arpa(arpa_path)
    binf = Path(workdir) / (Path(arpa_path).name + ".nplm")
    backoff.build_binary(t, binf)
    return sum(t.counts[1:]), os.path.getsize(arpa_path) / 1e6, os.path.getsize(binf) / 1e6


def neural_rows(path, test_lines, workdir):
    from nplm import convert
    from nplm.neural.network import NeuralNet
    from nplm.neural.vocab import examples
    rows = []
    ref = NeuralNet.load(path)
    ctx, tgt = examples([l.split() for l in test_lines], ref.vocab, ref.order)
    for dtype in ("neural", "float16", "int8"):
        out = Path(workdir) / f"neural.{dtype}.nplm"
        convert.convert(path, out, to=dtype)
        net = NeuralNet.load(out)
        rows.append((f"neural {dtype if dtype != 'neural' else 'float32'}", None, None,
                     os.path.getsize(out) / 1e6, net.perplexity(ctx, tgt)))
    return rows


def plot_rows(rows, path):
    """Test perplexity against binary size (MB) for (name, n-grams, ARPA MB, binary MB,
    ppl) rows; needs matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)", file=sys.stderr)
        return
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, _ng, _amb, bmb, ppl in rows:
        marker = "o" if name.startswith("KN") else "s" if name.startswith("neural") else "^"
        ax.scatter(bmb, ppl, marker=marker, label=f"{name} ({ppl:.1f})")
    ax.set_xlabel("model size (MB, nplm binary)")
    ax.set_ylabel("PTB test perplexity")
    ax.set_xscale("log")
    lo, hi = min(r[3] for r in rows), max(r[3] for r in rows)
    ax.set_xticks([t for t in (5, 10, 15, 20, 30, 40, 50, 70, 100, 150, 200, 300) if lo / 1.3 <= t <= hi * 1.3])
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.legend(fontsize=7, loc="best")
    ax.set_title("Quality against memory (cf. Baltescu & Blunsom 2015, section 7)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot written to {path}", file=sys.stderr)


def one_command(spec, quality, train, out, extra=()):
    """(wall seconds, peak RSS bytes, stderr) of ``nplm distil`` in its own process."""
    cmd = [sys.executable, "-m", "nplm", "distil", str(spec), "--text", str(train), "--order", "5",
           "--arpa", str(out), "--quality", quality, "-q", *extra]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, cwd=str(Path(__file__).resolve().parents[1]))
    err = p.stderr.read().decode()
    _, status, usage = os.wait4(p.pid, 0)
    secs = time.perf_counter() - t0
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{err}")
    return secs, usage.ru_maxrss * 1024, err


def one_command_rows(args, kn_ngrams, kn_ppl, test, train, work):
    from nplm.backoff.arpa import read_arpa
    print("\n| command | test ppl (kenlm) | vs KN5 | n-grams | size vs KN5 | wall | peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for q in args.quality:
        out = work / f"one-command.{q}.arpa"
        secs, rss, err = one_command(args.one_command, q, train, out, args.extra or ())
        ppl, _ = kenlm_ppl(out, test)
        ng = sum(read_arpa(out).counts[1:])
        print(err.strip(), file=sys.stderr)
        print(f"| `nplm distil --quality {q}` | {ppl:.2f} | {ppl / kn_ppl:.3f} | {ng:,} | {ng / kn_ngrams:.3f} "
              f"| {secs / 60:.1f} min | {rss / (1 << 30):.2f} GiB |", flush=True)


def teacher_rows(args, kn_bin, kn_ngrams, test, train, work):
    """Rows of the tables distilled from each --teacher at KN5's size and half of it."""
    from nplm.compose import distil
    rows = []
    teachers = [str(kn_bin) if t == "KN5" else t for t in (args.teacher or ["KN5"])]
    for t in teachers:
        name = Path(t).name if t != str(kn_bin) else "KN5"
        for label, target in (("equal size", kn_ngrams), ("half size", kn_ngrams // 2)):
            out = work / f"distil.{name}.{'eq' if target == kn_ngrams else 'half'}.arpa"
            t0 = time.perf_counter()
            tables = distil.distil_to_file(t, out, args.order, str(train), top_k=args.top_k,
                                           top_k_min_count=args.top_k_min_count, lower_teacher=args.lower,
                                           sample_text=args.sample_text,
                                           sample_min_count=args.sample_min_count,
                                           continuation=args.continuation or False,
                                           prune_to=target, progress=False)
            secs = time.perf_counter() - t0
            ng, amb, bmb = sizes(out, work)
            ppl, _ = kenlm_ppl(out, test)
            rows.append((f"distilled from {name}, {label}", ng, amb, bmb, ppl))
            print(f"{rows[-1][0]}: {ng} n-grams ({tables.counts}), ppl {ppl:.2f}, {secs:.1f} s", file=sys.stderr)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--teacher", action="append",
                    help="teacher model (repeatable; 'KN5' names the reference model); default KN5")
    ap.add_argument("--order", type=int, default=5, help="order of the distilled tables (default 5)")
    ap.add_argument("--top-k", type=int, default=0, help="top-k continuations per context (default 0)")
    ap.add_argument("--top-k-min-count", type=int, default=5)
    ap.add_argument("--lower", help="model for the orders below --order (default: the teacher)")
    ap.add_argument("--sample-text", help="also list the n-grams of this text sampled from the teacher "
                    "(nplm sample; <unk> written as UNK like the benchmark's texts)")
    ap.add_argument("--sample-min-count", type=int, nargs="+", default=[2],
                    help="count thresholds for the sampled n-grams (default 2)")
    ap.add_argument("--continuation", type=int, default=0,
                    help="reshape orders 1..K of the table for backing off (distil --continuation; default 0: off)")
    ap.add_argument("--neural", help="a neural model: also report float32/float16/int8 sizes and perplexity")
    ap.add_argument("--plot", help="write a PNG plot of perplexity against size here (needs matplotlib)")
    ap.add_argument("--keep", help="directory to keep the distilled ARPA files in")
    ap.add_argument("--one-command", metavar="SPEC", help="a KN5 + network(s) mixture spec: run the plain "
                    "`nplm distil SPEC --quality Q` for each --quality and report its table")
    ap.add_argument("--quality", nargs="+", default=["fast", "default", "best"], choices=["fast", "default", "best"])
    ap.add_argument("--extra", nargs=argparse.REMAINDER, help="more options for the one-command runs")
    args = ap.parse_args()

    from nplm.compose import distil
    test = ptb_lines("test")
    train = ptb_train_unk()
    kn5 = kn_arpa(5)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-distil-"))
    work.mkdir(parents=True, exist_ok=True)
    print("note: timings are wall-clock on a shared 2-core machine", file=sys.stderr)

    rows = []
    kn_ngrams, kn_arpa_mb, kn_bin_mb = sizes(kn5, work)
    kn_ppl, n_tok = kenlm_ppl(kn5, test)
    rows.append(("KN5 (nplm.estimate = lmplz)", kn_ngrams, kn_arpa_mb, kn_bin_mb, kn_ppl))
    print(f"KN5: {kn_ngrams} n-grams, ppl {kn_ppl:.2f} over {n_tok} tokens", file=sys.stderr)
    kn_bin = work / "kn5.nplm"
    os.replace(work / (kn5.name + ".nplm"), kn_bin)

    if args.one_command:
        one_command_rows(args, kn_ngrams, kn_ppl, test, train, work)
        return 0
    rows += teacher_rows(args, kn_bin, kn_ngrams, test, train, work)
    # KN5 distilled to order 3 (the teacher's trigram level as a smaller table)
    out3 = work / "distil.KN5.o3.arpa"
    distil.distil_to_file(str(kn_bin), out3, 3, str(train))
    ng, amb, bmb = sizes(out3, work)
    rows.append(("KN5 distilled to order 3", ng, amb, bmb, kenlm_ppl(out3, test)[0]))
    if args.neural:
        rows += neural_rows(args.neural, test, work)

    print("\n| model | n-grams | ARPA MB | binary MB | test ppl | vs KN5 |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, ng, amb, bmb, ppl in rows:
        ngs = f"{ng:,}" if ng is not None else "-"
        am = f"{amb:.1f}" if amb is not None else "-"
        print(f"| {name} | {ngs} | {am} | {bmb:.1f} | {ppl:.2f} | {ppl / kn_ppl:.3f} |")

    if args.plot:
        plot_rows(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
