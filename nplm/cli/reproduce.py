"""``nplm reproduce``: the whole PTB pipeline in one command."""
import os
import shlex
import sys

from nplm.cli.common import command, error
from nplm.recipes.ptb import PTB_FILES, Settings, reproduce


@command("reproduce", "Run the whole PTB pipeline (KN, neural, interpolation, distillation, "
         "quantisation) and write a Markdown report with plots")
class Reproduce:
    @staticmethod
    def add_arguments(p):
        p.add_argument("--data", required=True, help="directory with ptb.train.txt, ptb.valid.txt, ptb.test.txt")
        p.add_argument("--out", required=True, help="output directory: report.md, results.json, plots, models/")
        p.add_argument("--quick", action="store_true",
                       help="small subset and tiny networks: checks the pipeline in a few minutes")
        p.add_argument("--neural-minutes", type=float,
                       help="training time per neural model (default 8; quick: 0.5)")
        p.add_argument("--threads", type=int, default=2, help="threads for training and tuning (default 2)")
        p.add_argument("--reuse", action="store_true",
                       help="keep neural models already in OUT/models that were trained with the same "
                            "configuration (their recorded training time is reported)")
        p.add_argument("--only", action="append", metavar="STAGE",
                       help="run only stages whose name starts with this (repeatable; one of data, KN1, KN3, "
                            "KN5, 'kenlm reference', 'Vaswani NCE', 'Baltescu class NCE', 'V-NNLM fallback', "
                            "'interpolate linear', 'interpolate loglinear', distil, 'quantise float16', "
                            "'quantise int8', or a beginning such as interpolate). report.md and "
                            "results.json then hold only these stages: they replace an earlier run's "
                            "(use another --out to keep it)")

    @staticmethod
    def run(args):
        s = Settings.quick_preset() if args.quick else Settings.full_preset()
        if args.neural_minutes is not None:
            if not args.neural_minutes > 0:
                return error(f"--neural-minutes must be positive, not {args.neural_minutes}")
            s.neural_minutes = args.neural_minutes
        s.threads = args.threads
        s.reuse = args.reuse
        if not os.path.isdir(args.data):
            return error(f"--data {args.data}: no such data directory")
        missing = [f for f in PTB_FILES if not os.path.isfile(os.path.join(args.data, f))]
        if missing:
            return error(f"--data {args.data}: no {', '.join(missing)} there (the PTB text files)")
        command = "nplm reproduce " + shlex.join(args._argv[1:] if args._argv[:1] == ["reproduce"]
                                                 else args._argv)
        run = reproduce(args.data, args.out, s, only=set(args.only) if args.only else None, command=command)
        failed = [st.name for st in run.stages if st.status != "ok"]
        if failed:
            print(f"stages not available: {', '.join(failed)} (see {os.path.join(args.out, 'report.md')})",
                  file=sys.stderr)
        return 0 if run.stages and run.stages[0].status == "ok" else 1
