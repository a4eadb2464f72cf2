"""fragment: the log10 probability of each line of standard input scored as a
fragment (no <s> before it, no </s> after it), as KenLM's fragment prints it."""

import sys

from nplm.backoff.kenlm.reader import is_kenlm_binary, read_layout
from nplm.cli.kenlm._program import fail, program
from nplm.model import Model, quiet_config


@program("fragment")
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 1:
        raise fail("Expected model file name.")
    if is_kenlm_binary(argv[0]) and "probing" not in read_layout(argv[0])[0].model_name:
        print("Model type not supported yet.", file=sys.stderr)     # (KenLM's fragment exits 0)
        return 0
    model = Model(argv[0], quiet_config())
    out = sys.stdout
    for line in sys.stdin.buffer:
        words = line.rstrip(b"\n").decode("utf-8", "surrogateescape").split(" ")
        score = model.score(" ".join(w for w in words if w), bos=False, eos=False)
        out.write(f"{score:g}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
