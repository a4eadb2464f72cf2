"""The programs nplm installs under KenLM's names against KenLM's own, as commands.

lmplz (PTB train, <unk> written as UNK; the ARPA file, and the intermediate files of
--intermediate), build_binary (probing and trie of that
ARPA file), query (PTB test on the probing file and on the ARPA file), filter single
(the ARPA file to PTB test's vocabulary), filter union phrase (the ARPA file to PTB
test's sentences, each offering its n-grams of one to three words as phrases, as a
translation system's phrase table offers them) and interpolate (KN3 and KN5 of PTB train, as
KenLM's lmplz --intermediate writes them, weights 0.4 0.6) run with the same command
line, once by each side per round; the rounds
interleave the two and the best wall time of each is kept.  nplm's programs run as
pip installs them: setup.py's scripts, in a venv that sees the source tree through a
.pth file as a regular install sees nplm, so their time includes starting Python and
importing what each needs.  Every output is compared byte for byte.

    python tools/bench_programs.py [--repeat 2] [--order 3] [--kenlm-bin DIR] [--only PROGRAM ...]
    python tools/bench_programs.py --words 20M --order 5    # lmplz and build_binary at scale
"""
import argparse
import compileall
import filecmp
import os
import platform
import site
import subprocess
import time
import venv

import bench_scale
from _bench_common import CACHE, ROOT, kenlm_program, ptb_lines, ptb_train_unk

from nplm.backoff.kenlm import intermediate as intermediate_files


def kenlm_bin():
    lmplz = kenlm_program("lmplz")
    return os.path.dirname(lmplz) if lmplz else None


def timed(argv, stdin=None, stdout=None):
    with open(stdin or os.devnull, "rb") as f, open(stdout or os.devnull, "wb") as g:
        t = time.perf_counter()
        subprocess.run(argv, stdin=f, stdout=g, stderr=subprocess.DEVNULL, check=True, cwd=ROOT)
        return time.perf_counter() - t


def installed_programs():
    """A folder of nplm's programs as a regular install has them (see the docstring):
    setup.py's scripts (nplm/cli/kenlm/bin), their "#!python" pointed at a venv's
    interpreter as pip points it."""
    env = CACHE / "installed-venv"
    python = env / "bin" / "python"
    if not python.exists():
        venv.create(env, with_pip=False)
    paths = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(paths, "nplm-source.pth"), "w") as f:
        f.write("\n".join([str(ROOT), *site.getsitepackages()]) + "\n")
    for program in ("lmplz", "build_binary", "query", "filter", "interpolate"):
        source = (ROOT / "nplm" / "cli" / "kenlm" / "bin" / program).read_text()
        script = env / "bin" / program
        script.write_text(f"#!{python}\n" + source.partition("\n")[2])
        script.chmod(0o755)
    return env / "bin"


def intermediate(text, order, folder):
    """KenLM's lmplz --intermediate files of ``text`` (built once): their base name."""
    base = str(CACHE / f"programs-intermediate.o{order}")
    if not os.path.exists(base + ".kenlm_intermediate"):
        with open(text, "rb") as f:
            subprocess.run([os.path.join(folder, "lmplz"), "-o", str(order), "-S", "1G", "--intermediate", base],
                           stdin=f, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return base


def phrase_line(words, longest=3):
    """A sentence's phrases as a phrase table offers them for it: each of its n-grams
    of one to ``longest`` words, once, tab-separated."""
    return "\t".join(dict.fromkeys(" ".join(words[i:i + n]) for n in range(1, longest + 1)
                                   for i in range(len(words) - n + 1)))


def cases(text, order, folder, tag=""):
    """(name, program, arguments, stdin, stdout) with {side} for each side's files;
    ``tag`` names the files of a corpus other than PTB train."""
    arpa = str(CACHE / f"programs-{{side}}{tag}.o{order}.arpa")
    test = CACHE / "programs-ptb-test.txt"
    test.write_text("\n".join(ptb_lines("test")) + "\n")
    vocab = CACHE / "programs-ptb-test.vocab"
    vocab.write_text(" ".join(sorted({w for line in ptb_lines("test") for w in line.split()})) + "\n")
    phrases = CACHE / "programs-ptb-test.phrases"
    phrases.write_text("".join(phrase_line(line.split()) + "\n" for line in ptb_lines("test")))
    estimate_and_build = [
        (f"lmplz -o {order} -S 1G", "lmplz", ["-o", str(order), "-S", "1G"], str(text), arpa),
        (f"lmplz -o {order} -S 1G --intermediate", "lmplz",
         ["-o", str(order), "-S", "1G", "--intermediate", str(CACHE / f"programs-{{side}}{tag}.o{order}")],
         str(text), None),
        ("build_binary probing", "build_binary",
         [arpa.format(side="kenlm"), str(CACHE / f"programs-{{side}}{tag}.probing")], None, None),
        ("build_binary trie -q 8 -b 8", "build_binary",
         ["-q", "8", "-b", "8", "trie", arpa.format(side="kenlm"), str(CACHE / f"programs-{{side}}{tag}.trie")],
         None, None),
    ]
    if tag:                     # the other programs' cases are PTB's
        return estimate_and_build
    return estimate_and_build + [
        ("query probing, PTB test", "query", [str(CACHE / "programs-kenlm.probing")], str(test),
         str(CACHE / "programs-{side}.query-probing.txt")),
        ("query ARPA, PTB test", "query", [arpa.format(side="kenlm")], str(test),
         str(CACHE / "programs-{side}.query-arpa.txt")),
        ("filter single, PTB test's words", "filter",
         ["single", f"vocab:{vocab}", str(CACHE / "programs-{side}.filtered.arpa")], arpa.format(side="kenlm"), None),
        ("filter union phrase, PTB test's 1-3-word phrases", "filter",
         ["union", "phrase", f"vocab:{phrases}", str(CACHE / "programs-{side}.phrase.arpa")], arpa.format(side="kenlm"),
         None),
        ("interpolate -m KN3 KN5 -w 0.4 0.6", "interpolate",
         ["-m", intermediate(text, 3, folder), intermediate(text, 5, folder), "-w", "0.4", "0.6"], None,
         str(CACHE / "programs-{side}.interpolated.arpa")),
    ]


def scaled_corpus(words):
    """tools/bench_scale.py's corpus of ``words`` words ("20M"), cached."""
    path = CACHE / f"programs-corpus-{words}.txt"
    if not path.exists():
        bench_scale.build_corpus(path, bench_scale.word_count(words))
    return path


def run_case(case, folder, ours, repeat):
    name, program, args, stdin, stdout = case
    argv = {"kenlm": [os.path.join(folder, program)], "nplm": [str(ours / program)]}
    best = {"kenlm": float("inf"), "nplm": float("inf")}
    outputs = {}
    for _ in range(repeat):
        for side in ("kenlm", "nplm"):
            a = [x.format(side=side) for x in args]
            out = stdout.format(side=side) if stdout else None
            best[side] = min(best[side], timed(argv[side] + a, stdin, out))
            outputs[side] = out or a[-1]
    return name, best["kenlm"], best["nplm"], same_outputs(outputs["kenlm"], outputs["nplm"])


def same_outputs(kenlm, nplm):
    """Whether the two sides wrote the same bytes: a file, or every intermediate file
    of a base name."""
    if not os.path.exists(kenlm + intermediate_files.META):
        return filecmp.cmp(kenlm, nplm, shallow=False)
    order = len(intermediate_files.read_meta(kenlm)[0])
    return all(filecmp.cmp(k, n, shallow=False) for k, n in
               zip(intermediate_files.file_names(kenlm, order), intermediate_files.file_names(nplm, order)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--order", type=int, default=3)
    ap.add_argument("--kenlm-bin", default=kenlm_bin())
    ap.add_argument("--only", nargs="+", metavar="PROGRAM", help="run only these programs' cases")
    ap.add_argument("--words", help="lmplz and build_binary on a corpus of this many words (20M: "
                    "tools/bench_scale.py's PTB + WikiText-2 text) instead of PTB train")
    args = ap.parse_args()
    compileall.compile_dir(str(ROOT / "nplm"), quiet=1)     # no run compiles nplm's sources
    CACHE.mkdir(parents=True, exist_ok=True)
    text, tag = ptb_train_unk(), ""
    if args.words:
        text, tag = scaled_corpus(args.words), f"-w{args.words}"
    ours = installed_programs()
    start = timed([str(ours / "python"), "-c", "import nplm.cli.kenlm.lmplz, nplm.backoff.estimate"])
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, {platform.processor() or ''} "
          f"{os.cpu_count()} CPUs; python start + import: {start:.2f} s; best of {args.repeat} interleaved rounds")
    print("| command | KenLM (s) | nplm (s) | ratio KenLM/nplm | output |")
    print("|---|---:|---:|---:|---|")
    for case in cases(text, args.order, args.kenlm_bin, tag):
        if args.only and case[1] not in args.only:
            continue
        name, k, n, same = run_case(case, args.kenlm_bin, ours, args.repeat)
        print(f"| {name} | {k:.3f} | {n:.3f} | {k / n:.2f} | {'identical' if same else 'DIFFERENT'} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
