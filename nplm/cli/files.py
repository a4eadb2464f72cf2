"""``nplm convert`` and ``nplm verify``: model files."""
import sys

from nplm.backoff.arpa import read_arpa, write_arpa
from nplm.backoff.binary import build_binary
from nplm.cli.common import command, input_file, is_stream
from nplm.convert import backoff_tables, convert, detect, target_format
from nplm.io.atomic import refuse_stdout
from nplm.io.files import sniff
from nplm.verify import Unreadable, verify


@command("convert", "Convert between ARPA, nplm back-off/neural binaries, float16/int8 neural and ISI NPLM; "
         "KenLM binaries to ARPA")
class Convert:
    OUTPUTS = ("output",)
    INPUTS = ("input", "text")

    @staticmethod
    def add_arguments(p):
        p.add_argument("input", help="model file (format detected from its content); '-': an ARPA file "
                       "(plain or compressed) on stdin")
        p.add_argument("output", help="output file (written atomically; never the input); '-': ARPA "
                       "text to stdout")
        p.add_argument("--to", choices=["arpa", "binary", "neural", "float16", "int8", "isi"],
                       help="output format (default: from the output name: .arpa[.gz|.bz2|.xz] ARPA, "
                            ".isi/.nnlm ISI, .nplm/.bin nplm binary (float32 for a neural model); "
                            "else the input's counterpart)")
        p.add_argument("--text", type=input_file, help="neural models: report the perplexity change on this text (an ISI "
                       "output is read back as nplm reads it); refused for back-off conversions")

    @staticmethod
    def run(args):
        if "-" in (args.input, args.output) or is_stream(args.input):
            return Convert.stdio(args)
        sf, tf, report = convert(args.input, args.output, to=args.to, text=args.text,
                                 messages=lambda m: print(f"nplm: {m}", file=sys.stderr))
        msg = f"{sf} -> {tf}"
        if "bytes_after" in report:
            msg += f", {report['bytes_before']} -> {report['bytes_after']} bytes"
        if "perplexity_after" in report:
            msg += (f", perplexity {report['perplexity_before']:.3f} -> {report['perplexity_after']:.3f} "
                    f"({100 * report['perplexity_change']:+.3f}%)")
        print(msg, file=sys.stderr)
        return 0

    @staticmethod
    def stdio(args):
        """'-' as the input (stdin) or the output (stdout): a stream carries ARPA text
        only.  Stdin can be read once, so it is not sniffed for its format first; a
        binary is memory-mapped from a file, so it cannot go to a pipe."""
        stream = None
        if is_stream(args.input):
            kind, stream = sniff(args.input)
            if kind != "arpa":
                stream.close()
                raise ValueError(f"{args.input}: a {kind} binary is memory-mapped, so it must be a regular "
                                 "file, not a pipe; a stream carries ARPA text only")
        sf = "arpa" if stream is not None else detect(args.input)
        if sf not in ("arpa", "binary", "kenlm"):
            raise ValueError(f"{args.input} is a {sf} model: '-' (stdout) takes ARPA text only; give "
                             "the output a file name")
        tf = target_format(sf, args.output, args.to)
        if tf not in ("arpa", "binary"):
            raise ValueError(f"cannot convert {sf} to {tf}: a back-off model converts to arpa or binary")
        if tf != "arpa":
            refuse_stdout(args.output, hint=" (or --to arpa for ARPA text)")
        if args.text is not None:
            raise ValueError(f"--text measures the perplexity change of a neural model's conversion; "
                             f"{sf} -> {tf} changes no value")
        if stream is not None:
            with stream:
                tables = read_arpa(args.input, stream=stream)
        else:
            tables = read_arpa(args.input) if sf == "arpa" else backoff_tables(args.input, sf)
        if tf == "arpa":
            write_arpa(tables, args.output)
        else:
            build_binary(tables, args.output)
        print(f"{sf} -> {tf}", file=sys.stderr)
        return 0




@command("verify", "Check model files completely: every array's checksum and a full load (an "
         "interpolation spec: each component, then the mixture)")
class Verify:
    @staticmethod
    def add_arguments(p):
        p.add_argument("models", nargs="+", help="model files (nplm binaries, ARPA, interpolation specs)")

    @staticmethod
    def run(args):
        failed = 0
        for path in args.models:
            if path == "-":
                print("nplm: error: verify needs a model's file name, not '-': a model is checked "
                      "(and memory-mapped) from its file, not read from stdin", file=sys.stderr)
                failed += 1
                continue
            try:
                print(f"{path}: {verify(path)}")
            except Unreadable as e:       # nothing known about the content: not "damaged"
                print(f"{path}: {e.label}: {e}", file=sys.stderr)
                failed += 1
            except (OSError, ValueError) as e:
                print(f"{path}: DAMAGED: {e}", file=sys.stderr)
                failed += 1
        return 1 if failed else 0


# Commands defined in their own modules
