"""Check that ``nplm estimate`` writes byte-identical ARPA files to KenLM's lmplz.

Runs lmplz (env NPLM_LMPLZ, PATH, or /opt/kenlm-src/build/bin/lmplz) and nplm on the
same text with the same flags, over a matrix of options, and compares the files.
Exit status 1 when any differs.  The CI tests compare against the stored reference
ARPAs instead, since lmplz is not a dependency.

    python tools/check_lmplz.py [--full]     # --full adds full PTB / WikiText-2 5-grams
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_common import ROOT, SHARED, lmplz_path  # noqa: E402
from bench_estimate import corpus  # noqa: E402

REF = SHARED / "reference"

FLAGS = [
    "-o 1", "-o 2", "-o 3", "-o 4", "-o 5", "-o 6",
    "-o 2 --interpolate_unigrams 0",
    "-o 4 --vocab_pad 20000",
    "-o 3 --discount_fallback 0.3 0.8",
    "-o 4 --prune 0 1 1",
    "-o 5 --prune 0 0 1 2",
    "-o 3 --limit_vocab_file {vocab}",
    "-o 4 --prune 0 0 3 --limit_vocab_file {vocab}",
    "-o 3 --verbose_header",
]


def run_both(lmplz, text, flags, tmp):
    args = flags.split()
    ours, theirs = tmp / "nplm.arpa", tmp / "lmplz.arpa"
    with open(text, "rb") as f:
        r = subprocess.run([lmplz, *args, "-S", "1G", "--arpa", str(theirs)], stdin=f,
                           capture_output=True)
    if r.returncode:
        return f"lmplz failed: {r.stderr.decode(errors='replace')[-300:]}"
    r = subprocess.run([sys.executable, "-m", "nplm", "estimate", *args, "--text", str(text),
                        "--arpa", str(ours), "-q"], cwd=ROOT, capture_output=True)
    if r.returncode:
        return f"nplm failed: {r.stderr.decode(errors='replace')[-300:]}"
    a, b = ours.read_bytes(), theirs.read_bytes()
    if "--verbose_header" in flags:
        # the header names the input: lmplz says stdin, nplm the file
        a = a.split(b"\\data\\", 1)[1]
        b = b.split(b"\\data\\", 1)[1]
    if a == b:
        return "IDENTICAL"
    lines_a, lines_b = a.split(b"\n"), b.split(b"\n")
    differ = sum(x != y for x, y in zip(lines_a, lines_b)) + abs(len(lines_a) - len(lines_b))
    return f"DIFFERENT ({differ} lines)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="also full PTB and WikiText-2 5-grams")
    args = ap.parse_args()
    lmplz = lmplz_path()
    if lmplz is None:
        raise SystemExit("lmplz not found (set NPLM_LMPLZ)")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        vocab = tmp / "vocab.txt"
        vocab.write_text("the of and a to in N UNK is that for\n")
        cases = [(REF / "ptb5k.txt", f.format(vocab=vocab)) for f in FLAGS]
        blank = tmp / "blank-lines.txt"
        lines = (REF / "tiny200.txt").read_text().splitlines(True)
        blank.write_text("".join(lines[:50]) + "\n   \n" + "".join(lines[50:]))
        cases.append((blank, "-o 3 --discount_fallback"))
        if args.full:
            cases += [(corpus("ptb"), "-o 5"), (corpus("wiki2"), "-o 5"),
                      (corpus("ptb"), "-o 4 --prune 0 0 1 2")]
        for text, flags in cases:
            result = run_both(lmplz, text, flags, tmp)
            failures += result != "IDENTICAL"
            print(f"{text.name:32} {flags.replace(str(vocab), 'vocab.txt'):48} {result}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
