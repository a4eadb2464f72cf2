"""Shortlist output layers on WikiText-2: test perplexity, training speed and query
time of a class-output network over the whole vocabulary (33,278 words) against
shortlists of 5k, 10k and 20k words, with and without the shortlist on the input side.

    python tools/bench_shortlist.py                          # every row, 2 epochs each
    python tools/bench_shortlist.py --epochs 1 --rows 0,10000 --json benchmarks/shortlist.json

Every row trains the same network (5-gram, diagonal contexts, no hidden layer, class
output with frequency-binned classes, so that clustering time does not enter, the
default objective: class NCE) for the same number of epochs with the same seed and
threads, validating on the validation text after each epoch, and is then scored
exactly over the whole vocabulary on the test text (no word of which is out of the
vocabulary).  Blank lines of the WikiText files are left out (heading lines are kept).

Training speed is the examples per second of the epochs (the trainer's own figure,
validation excluded); query times are per token, best of ``--repeat`` rounds that take
every model in turn: ``score_sentences`` on one thread (the batched kernels) and
``score`` per sentence (the kenlm API's single queries through the context cache).

A second table (``--throughput S``, 0 to skip) gives training speed alone for both
objectives of the class output: each configuration trains for S seconds from its
initial weights, in ``--repeat`` interleaved rounds, best kept.  Class NCE costs about
the same per example at any output size (2k + 2 output rows); maximum likelihood costs
C + V/C rows, which a shortlist shrinks.

``--timings-only`` skips training and measures the models a previous run left in
``--models`` by CPU time (process time, every thread), which the other jobs of a busy
machine disturb far less than wall time: query CPU µs per token and training examples
per CPU second.
"""
import argparse
import math
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench_common import CACHE, SHARED, save_results  # noqa: E402

import nplm  # noqa: E402
from nplm.neural.network import NeuralConfig, NeuralNet  # noqa: E402
from nplm.neural.train import Corpus, TrainConfig, Trainer, output_structures, train  # noqa: E402
from nplm.neural.vocab import examples, read_sentences  # noqa: E402

WIKI = SHARED / "data" / "wikitext2"


def nonblank_copy(split):
    """WikiText-2 ``split`` without its blank lines, cached."""
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"wiki.{split}.nonblank.txt"
    if not out.exists():
        lines = (WIKI / f"wiki.{split}.tokens").read_text(encoding="utf-8").splitlines()
        out.write_text("".join(line.strip() + "\n" for line in lines if line.strip()), encoding="utf-8")
    return out


def train_row(size, inputs, args, data, out):
    """Train one model; (net, seconds, examples/s per epoch, valid ppl per epoch)."""
    cfg = NeuralConfig(order=args.order, embedding_dim=args.embedding_dim, hidden=(), context="diagonal",
                       output="class", objective=args.objective, clustering="frequency",
                       shortlist=size, shortlist_input=inputs)
    tc = TrainConfig(epochs=args.epochs, threads=args.threads, seed=1, time_limit=args.time_limit * 60)
    lines = []
    t = time.perf_counter()
    net = train(data["train"], data["valid"], out, cfg, tc, log=lines.append, progress=False)
    seconds = time.perf_counter() - t
    speeds = [float(m.group(1).replace(",", "")) for m in map(re.compile(r"([\d,]+) examples/s").search, lines) if m]
    valid = [float(m.group(1)) for m in map(re.compile(r"valid ppl ([\d.]+)").search, lines) if m]
    for line in lines:
        print("   ", line, flush=True)
    return net, seconds, speeds, valid


def configs(args):
    """(name, shortlist size, inputs) of the rows asked for."""
    out = []
    for size in (int(x) for x in args.rows.split(",")):
        for inputs in ((False,) if size == 0 else {"both": (False, True), "no": (False,), "yes": (True,)}[args.inputs]):
            out.append(("full" if size == 0 else f"{size}" + ("-in" if inputs else ""), size, inputs))
    return out


def throughput(args, data):
    """Training examples/s of each row's network for the class output's two
    objectives: ``args.throughput`` seconds each from the initial weights, best of
    ``args.repeat`` interleaved rounds."""
    corpus = Corpus(data["train"], None, args.order)
    cells = {}
    for _ in range(args.repeat):
        for objective in ("nce", "mle"):
            for name, size, inputs in configs(args):
                cfg = NeuralConfig(order=args.order, embedding_dim=args.embedding_dim, hidden=(),
                                   context="diagonal", output="class", objective=objective,
                                   clustering="frequency", shortlist=size, shortlist_input=inputs).validate()
                wc, tree = output_structures(cfg, corpus.vocab, corpus.train[1], 1, lambda s: None)
                net = NeuralNet.create(cfg, corpus.vocab, word_class=wc, tree=tree, seed=1)
                trainer = Trainer(net, corpus, TrainConfig(threads=args.threads, seed=1), log=None, progress=False)
                trainer.deadline = time.time() + args.throughput
                cpu = time.process_time()
                speed = trainer.run_epoch()[1]
                if args.timings_only:           # examples per CPU second instead of per second
                    seen = trainer.cut_short or trainer.train_rows[1].size
                    speed = seen / max(time.process_time() - cpu, 1e-9)
                cells[name, objective] = max(cells.get((name, objective), 0.0), speed)
                print(f"   {name} {objective}: {speed:,.0f} ex/{'CPU ' if args.timings_only else ''}s", flush=True)
    names = [c[0] for c in configs(args)]
    rows = [[n, round(cells[n, "nce"]), round(cells[n, "mle"])] for n in names]
    unit = "examples per CPU second" if args.timings_only else "examples/s"
    return {"title": f"Training speed alone ({unit}) by objective", "columns": ["model", "class NCE", "class MLE"],
            "rows": rows, "notes": f"{args.throughput:g} s of training per cell from the initial weights, best of "
                                   f"{args.repeat} interleaved rounds, same network and threads as above."}


def query_times(models, lines, repeat, clock=time.perf_counter):
    """Best µs per token of score_sentences (one thread) and of score per sentence, by
    ``clock`` (wall time, or time.process_time for CPU time)."""
    tokens = sum(len(li.split()) + 1 for li in lines)
    best = {k: [math.inf, math.inf] for k in models}
    for _ in range(repeat):
        for k, m in models.items():
            t = clock()
            m.score_sentences(lines, threads=1)
            best[k][0] = min(best[k][0], clock() - t)
            t = clock()
            for li in lines:
                m.score(li)
            best[k][1] = min(best[k][1], clock() - t)
    return {k: (v[0] / tokens * 1e6, v[1] / tokens * 1e6) for k, v in best.items()}


def timings_only(args, data):
    """Tables of CPU-timed queries and training speed of the models in args.models."""
    test = read_sentences(data["test"])
    lines = [" ".join(s) for s in test[:args.query_lines]]
    models = {name: nplm.Model(str(Path(args.models) / f"wiki-{name}.nplm")) for name, _, _ in configs(args)}
    times = query_times(models, lines, args.repeat, time.process_time)
    columns = ["model", "output units", "batch CPU µs/tok", "score CPU µs/tok"]
    rows = [[k, m._data.net.n_units, round(times[k][0], 2), round(times[k][1], 2)] for k, m in models.items()]
    tables = [{"title": "Query CPU time per token", "columns": columns, "rows": rows,
               "notes": f"Best of {args.repeat} interleaved rounds over {len(lines)} test lines: score_sentences "
                        "on one thread (batched kernels) and score per sentence (single queries through the "
                        "context cache), exact class mode."}]
    if args.throughput:
        tables.append(throughput(args, data))
    return tables


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="0,5000,10000,20000", help="shortlist sizes (0: the whole vocabulary)")
    ap.add_argument("--inputs", choices=["both", "no", "yes"], default="both",
                    help="rows with the shortlist on the input side too (--shortlist-input)")
    ap.add_argument("--epochs", type=int, default=2, help="epochs per model (default 2)")
    ap.add_argument("--time-limit", type=float, default=0, help="minutes per model, 0: none (default)")
    ap.add_argument("--order", type=int, default=5)
    ap.add_argument("--embedding-dim", type=int, default=256)
    ap.add_argument("--objective", default="auto", help="class output's objective (default: NCE)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--query-lines", type=int, default=1000, help="test lines the query timings score")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of query timings (and of --throughput)")
    ap.add_argument("--throughput", type=float, default=15,
                    help="seconds of training per cell of the speed-by-objective table (0: no table)")
    ap.add_argument("--models", default=str(CACHE / "shortlist-models"), help="folder for the trained models")
    ap.add_argument("--json", help="save the table here for tools/docs_benchmarks.py")
    ap.add_argument("--timings-only", action="store_true",
                    help="no training: CPU-time the queries and training speed of the models in --models")
    args = ap.parse_args()
    if not WIKI.is_dir():
        sys.exit(f"no WikiText-2 at {WIKI}")
    data = {s: nonblank_copy(s) for s in ("train", "valid", "test")}
    if args.timings_only:
        tables = timings_only(args, data)
        for t in tables:
            print("\n" + t["title"] + "\n" + " | ".join(t["columns"]))
            for row in t["rows"]:
                print(" | ".join(str(c) for c in row))
        if args.json:
            save_results(args.json, "Shortlist output layers on WikiText-2: CPU time", tables)
        return
    test = read_sentences(data["test"])
    Path(args.models).mkdir(parents=True, exist_ok=True)
    rows = []
    for name, size, inputs in configs(args):
        print(f"== {name}", flush=True)
        path = Path(args.models) / f"wiki-{name}.nplm"
        net, seconds, speeds, valid = train_row(size, inputs, args, data, path)
        test_ppl = net.perplexity(*examples(test, net.vocab, net.order))
        mb = sum(p.nbytes for p in net.params.values()) / 2 ** 20
        rows.append({"name": name, "size": size, "inputs": inputs, "units": net.n_units, "rows": net.n_inputs,
                     "mb": mb, "valid": valid[-1] if valid else math.nan, "test": test_ppl,
                     "speed": sum(speeds) / len(speeds), "seconds": seconds, "epochs": len(speeds), "path": path})
        print(f"   test ppl {test_ppl:.2f}, {rows[-1]['speed']:,.0f} ex/s, {seconds:.0f} s", flush=True)
    lines = [" ".join(s) for s in test[:args.query_lines]]
    models = {r["name"]: nplm.Model(str(r["path"])) for r in rows}
    times = query_times(models, lines, args.repeat)
    full = next((r for r in rows if r["size"] == 0), None)
    table = []
    for r in rows:
        rel = f"{100 * (r['test'] / full['test'] - 1):+.1f}%" if full else "–"
        table.append([r["name"], r["units"], r["rows"], round(r["mb"], 1), f"{r['valid']:.2f}", f"{r['test']:.2f}",
                      rel, round(r["speed"]), r["epochs"], round(r["seconds"]), round(times[r["name"]][0], 1),
                      round(times[r["name"]][1], 1)])
    columns = ["model", "output units", "embedding rows", "weights MB", "valid ppl", "test ppl", "vs full",
               "train ex/s", "epochs", "train s", "batch µs/tok", "score µs/tok"]
    print("\n" + " | ".join(columns))
    for row in table:
        print(" | ".join(str(c) for c in row))
    tables = [{"columns": columns, "rows": table}]
    if args.throughput:
        tables.append(throughput(args, data))
        print("\n" + " | ".join(tables[-1]["columns"]))
        for row in tables[-1]["rows"]:
            print(" | ".join(str(c) for c in row))
    if args.json:
        objective = "auto (class NCE, k=10)" if args.objective == "auto" else args.objective
        notes = (f"WikiText-2 without blank lines (train {sum(1 for _ in open(data['train']))} lines); "
                 f"{args.order}-gram, diagonal contexts, {args.embedding_dim}-d, no hidden layer, class output "
                 f"(frequency bins, about sqrt(units) classes), objective {objective}, "
                 f"{args.threads} threads, {args.epochs} epochs each (seed 1). 'full': every word an output unit; 'N': a "
                 "shortlist of N words plus the OOS unit; '-in': the shortlist on the input side too. "
                 "Perplexities exact over the whole vocabulary. Query times: best of "
                 f"{args.repeat} interleaved rounds over {len(lines)} test lines.")
        tables[0]["notes"] = notes
        save_results(args.json, "Shortlist output layers on WikiText-2", tables)


if __name__ == "__main__":
    main()
