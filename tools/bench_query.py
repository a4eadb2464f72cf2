"""Query speed of nplm's back-off engine against the real kenlm module, in one process.

On a 5-gram Kneser-Ney model of the full PTB train set (built by KenLM's lmplz
when it is available, else by nplm.estimate), scoring ptb.test.txt:
load times (ARPA, binary), score / full_scores / BaseScore loop / batch API
throughput, and resident memory of the loaded binary.  Prints ratios nplm/kenlm
(> 1 means nplm is faster / smaller for memory the inverse).

    python tools/bench_query.py [--order 5] [--repeat 7]

kenlm and nplm take turns in every round (best of each kept), so both see the same
stretches of a noisy machine.
"""
import argparse
import os
import subprocess
import sys

import kenlm
from _bench_common import CACHE, best_time, best_times, kenlm_program, kn_arpa, ptb_lines, rss_mib_of, save_results

import nplm


def quiet(mod):
    c = mod.Config()
    c.show_progress = False
    c.arpa_complain = mod.ARPALoadComplain.NONE
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--order", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=7, help="interleaved rounds of the query loops (best kept)")
    ap.add_argument("--json", help="also save the table here, for tools/docs_benchmarks.py")
    args = ap.parse_args()

    arpa = str(kn_arpa(args.order))
    lines = ptb_lines("test")
    tokens = sum(len(l.split()) + 1 for l in lines)
    print(f"model: {arpa} ({os.path.getsize(arpa) / 2**20:.0f} MiB ARPA); "
          f"text: ptb.test.txt, {len(lines)} sentences, {tokens} tokens incl. </s>")

    rows = []
    t_k, km = best_time(lambda: kenlm.Model(arpa, quiet(kenlm)), 1)
    t_n, nm = best_time(lambda: nplm.Model(arpa, quiet(nplm)), 1)
    rows.append(("load ARPA (s)", t_k, t_n, t_k / t_n))
    binary = str(CACHE / f"ptb.o{args.order}.nplm")
    nplm.build_binary(arpa, binary)
    t_b, nb = best_time(lambda: nplm.Model(binary), 20)
    kbin = str(CACHE / f"ptb.o{args.order}.kenlm-probing")
    build_binary = kenlm_program("build_binary")
    if build_binary:
        if not os.path.exists(kbin):
            subprocess.run([build_binary, "probing", arpa, kbin], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t_kb, _ = best_time(lambda: kenlm.Model(kbin, quiet(kenlm)), 5)
        rows.append(("load binary (s)", t_kb, t_b, t_kb / t_b))
    else:
        kbin = None
        rows.append(("load binary (s)", float("nan"), t_b, float("nan")))

    def score_all(m):
        return sum(m.score(l) for l in lines)

    def full_all(m):
        n = 0
        for l in lines:
            for _ in m.full_scores(l):
                n += 1
        return n

    def basescore_all(m, State):
        total = 0.0
        s, out = State(), State()
        for l in lines:
            m.BeginSentenceWrite(s)
            for w in l.split():
                total += m.BaseScore(s, w, out)
                s, out = out, s
            total += m.BaseScore(s, "</s>", out)
        return total

    for name, fk, fn in [
        ("score", lambda: score_all(km), lambda: score_all(nb)),
        ("full_scores", lambda: full_all(km), lambda: full_all(nb)),
        ("BaseScore loop", lambda: basescore_all(km, kenlm.State), lambda: basescore_all(nb, nplm.State)),
    ]:
        tk, tn = best_times([fk, fn], args.repeat)
        rows.append((f"{name} (M tok/s)", tokens / tk / 1e6, tokens / tn / 1e6, tk / tn))
    t_score_k, tn1, tn2 = best_times([lambda: score_all(km)] + [
        lambda t=t: nb.score_sentences(lines, threads=t) for t in (1, 2)], args.repeat)
    for threads, tn in ((1, tn1), (2, tn2)):
        rows.append((f"batch score_sentences, {threads} thread(s) (M tok/s; ratio vs kenlm score)",
                     tokens / t_score_k / 1e6, tokens / tn / 1e6, t_score_k / tn))

    # Resident memory: a fresh interpreter reads the test lines, takes a baseline,
    # loads the binary and scores every line, then reports the growth.
    lines_file = os.path.join(os.path.dirname(arpa), "ptb.test.lines")
    with open(lines_file, "w") as f:
        f.write("\n".join(lines))
    prelude = f"lines = open({lines_file!r}).read().splitlines()\nbefore = rss()\n"
    rss_n = rss_mib_of("import nplm\n" + prelude + f"m = nplm.Model({binary!r})\n"
                       "total = sum(m.score(l) for l in lines)\nafter = rss()")
    if kbin:
        rss_k = rss_mib_of("import kenlm\nc = kenlm.Config()\nc.show_progress = False\n" + prelude +
                           f"m = kenlm.Model({kbin!r}, c)\n"
                           "total = sum(m.score(l) for l in lines)\nafter = rss()")
        size_k = os.path.getsize(kbin) / 2**20
    else:
        rss_k = size_k = float("nan")
    rows.append(("binary file size (MiB)", size_k, os.path.getsize(binary) / 2**20,
                 size_k / (os.path.getsize(binary) / 2**20)))
    rows.append(("RSS after load + query (MiB)", rss_k, rss_n, rss_k / rss_n))

    print(f"\n{'measure':<62} {'kenlm':>10} {'nplm':>10} {'ratio':>7}")
    for name, k, n, r in rows:
        print(f"{name:<62} {k:>10.4g} {n:>10.4g} {r:>7.2f}")
    if args.json:
        save_results(args.json, "Back-off queries against the kenlm module", [{
            "columns": ["measure", "kenlm", "nplm", "ratio"], "rows": [list(r) for r in rows],
            "notes": (f"KN{args.order} of PTB train; ptb.test.txt, {tokens} tokens. Ratio: kenlm time / nplm "
                      "time (or nplm throughput / kenlm), and kenlm size / nplm size: above 1 means nplm "
                      "is ahead.")}])
    print("\nratio: kenlm time / nplm time (or nplm throughput / kenlm), and kenlm size / nplm size:"
          " above 1 means nplm is ahead.")


if __name__ == "__main__":
    sys.exit(main())
