"""nplm reading KenLM's own binary files against the real kenlm module, in one process.

A 5-gram Kneser-Ney model of the full PTB train set (lmplz when available, else
nplm.estimate) is written by KenLM's build_binary as probing, trie, trie -q 8 -b 8
and trie -a 22 -q 8 -b 8.  For each file, kenlm and nplm load the same file and take
turns in every round (best of each kept): load time, then score / full_scores /
BaseScore-loop throughput on ptb.test.txt; resident memory after load and a pass over
the text is measured in fresh interpreters.  Every ratio is kenlm's time (or
memory) over nplm's: above 1 means nplm is ahead.

    python tools/bench_kenlm_binary.py [--repeat 5] [--build-binary PATH] [--json benchmarks/kenlm_binary.json]
"""
import argparse
import os
import subprocess

import kenlm
from _bench_common import CACHE, PTB, best_times, kn_arpa, lmplz_path, ptb_lines, rss_mib_of, save_results

import nplm

LAYOUTS = {"probing": ["probing"], "trie": ["trie"], "trie -q 8 -b 8": ["-q", "8", "-b", "8", "trie"],
           "trie -a 22 -q 8 -b 8": ["-a", "22", "-q", "8", "-b", "8", "trie"]}


def build_binaries(arpa, build_binary):
    out = {}
    for name, flags in LAYOUTS.items():
        path = CACHE / f"ptb.o5.kenlm-{name.replace(' ', '').replace('-', '_')}.bin"
        if not path.exists():
            subprocess.run([build_binary, *flags, str(arpa), f"{path}.{os.getpid()}.tmp"], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.replace(f"{path}.{os.getpid()}.tmp", path)
        out[name] = str(path)
    return out


def query_loops(model, state_type, lines):
    def score():
        for s in lines:
            model.score(s)

    def full_scores():
        for s in lines:
            list(model.full_scores(s))

    def base_score():
        a, b = state_type(), state_type()
        for s in lines:
            model.BeginSentenceWrite(a)
            for w in s.split():
                model.BaseScore(a, w, b)
                a, b = b, a
            model.BaseScore(a, "</s>", b)
    return score, full_scores, base_score


RSS_CODE = """
import {mod}
lines = open({text!r}).read().replace('<unk>', 'UNK').splitlines()
before = rss()
m = {mod}.Model({path!r})
for s in lines:
    m.score(s)
after = rss()
"""


def bench_file(name, path, lines, tokens, repeat):
    rows = []
    t_k, t_n = best_times([lambda: kenlm.Model(path), lambda: nplm.Model(path)], repeat)
    rows.append(("load (ms)", t_k * 1e3, t_n * 1e3, t_k / t_n))
    km, nm = kenlm.Model(path), nplm.Model(path)
    for label, fk, fn in zip(("score", "full_scores", "BaseScore loop"), query_loops(km, kenlm.State, lines),
                             query_loops(nm, nplm.State, lines)):
        t_k, t_n = best_times([fk, fn], repeat)
        rows.append((f"{label} (M tok/s)", tokens / t_k / 1e6, tokens / t_n / 1e6, t_k / t_n))
    test = str(PTB / "ptb.test.txt")
    rss_k = min(rss_mib_of(RSS_CODE.format(mod="kenlm", text=test, path=path)) for _ in range(2))
    rss_n = min(rss_mib_of(RSS_CODE.format(mod="nplm", text=test, path=path)) for _ in range(2))
    rows.append(("RSS after load+score (MiB)", rss_k, rss_n, rss_k / rss_n))
    print(f"\n{name}: {path} ({os.path.getsize(path) / 2**20:.1f} MiB)")
    print(f"  {'':28s} {'kenlm':>10s} {'nplm':>10s} {'ratio':>7s}")
    for label, a, b, r in rows:
        print(f"  {label:28s} {a:10.3f} {b:10.3f} {r:6.2f}x")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="interleaved rounds (best kept)")
    lmplz = lmplz_path()
    default_bb = os.path.join(os.path.dirname(lmplz), "build_binary") if lmplz else "build_binary"
    ap.add_argument("--build-binary", default=default_bb, help="KenLM's build_binary")
    ap.add_argument("--json", help="also save the tables here, for tools/docs_benchmarks.py")
    args = ap.parse_args()
    arpa = kn_arpa(5)
    files = build_binaries(arpa, args.build_binary)
    lines = ptb_lines("test")
    tokens = sum(len(s.split()) + 1 for s in lines)
    print(f"model: PTB train 5-gram ({arpa}); text: ptb.test.txt, {len(lines)} sentences, {tokens} tokens "
          f"incl. </s>; ratio = kenlm time (or memory) / nplm's: above 1 means nplm is ahead")
    tables = []
    for name, path in files.items():
        rows = bench_file(name, path, lines, tokens, args.repeat)
        tables.append({"title": f"build_binary {name} ({os.path.getsize(path) / 2**20:.1f} MiB)",
                       "columns": ["measure", "kenlm", "nplm", "ratio"], "rows": [list(r) for r in rows]})
    if args.json:
        tables[-1]["notes"] = (f"KN5 of PTB train (lmplz), each file written by KenLM's build_binary and loaded "
                               f"by both modules; ptb.test.txt, {tokens} tokens; best of {args.repeat} "
                               "interleaved rounds. Ratio: kenlm time / nplm time (or nplm throughput / "
                               "kenlm's), kenlm memory / nplm memory: above 1 means nplm is ahead.")
        save_results(args.json, "KenLM's binary files: nplm against the kenlm module", tables)


if __name__ == "__main__":
    main()
