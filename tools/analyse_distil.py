"""Where a distilled table loses its teacher's gain: PTB test tokens split by the
n-gram length the table used (kenlm's full_scores), with the teacher's and the
table's mean log10 probability and each length's share of the loss.

    python tools/analyse_distil.py TEACHER TABLE.arpa [TABLE2.arpa ...]

TEACHER is anything nplm.Model loads (e.g. an interpolation spec); the tables are
read by the real kenlm module.  Test text as in bench_distil.py (<unk> as UNK).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from _bench_common import ptb_lines  # noqa: E402


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("teacher", help="anything nplm.Model loads (e.g. an interpolation spec)")
    ap.add_argument("tables", nargs="+", metavar="TABLE.arpa", help="distilled tables (read by kenlm)")
    args = ap.parse_args(argv)
    import kenlm

    import nplm
    test = ptb_lines("test")
    missing = [p for p in [args.teacher] + args.tables if not Path(p).is_file()]
    if missing:
        print(f"analyse_distil: no such file: {', '.join(missing)}", file=sys.stderr)
        return 1
    try:
        teacher = nplm.Model(args.teacher)
    except OSError as e:            # nplm.ModelLoadError names the file and the problem
        print(f"analyse_distil: {e}", file=sys.stderr)
        return 1
    T = np.array([s[0] for line in test for s in teacher.full_scores(line)])
    for path in args.tables:
        try:
            k = kenlm.Model(path)
        except OSError as e:
            print(f"analyse_distil: {e}", file=sys.stderr)
            return 1
        scores = [s for line in test for s in k.full_scores(line)]
        K = np.array([s[0] for s in scores])
        L = np.array([s[1] for s in scores])
        loss = (T - K).sum() / len(T)
        print(f"{path}: perplexity teacher {10 ** -T.mean():.2f}, table {10 ** -K.mean():.2f}")
        print("| n-gram length | tokens | teacher mean log10 p | table mean log10 p | share of the loss |")
        print("|---|---:|---:|---:|---:|")
        for n in range(1, int(L.max()) + 1):
            sel = L == n
            if sel.any():
                share = (T[sel] - K[sel]).sum() / len(T) / loss if loss else 0.0
                print(f"| {n} | {100 * sel.mean():.1f}% | {T[sel].mean():.3f} | {K[sel].mean():.3f} | "
                      f"{100 * share:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
