"""``nplm <command>``: argument parsing and progress only; the work lives in the
library modules.  Each command registers itself with ``@command`` (nplm.cli.common) in
the module of its family, imported below; its ``add_arguments(parser)`` declares flags
and its ``run(args)`` returns an exit code.  KenLM's program names after ``nplm``
(``nplm lmplz ...``) run those programs (nplm.cli.kenlm)."""
import argparse
import difflib
import importlib
import os
import signal
import sys
import threading

from nplm import __version__
from nplm.cli import output
from nplm.cli.common import COMMANDS, command, error
from nplm.cli.kenlm import PROGRAMS as KENLM_PROGRAMS
from nplm.cli.kenlm import run as run_kenlm_program
from nplm.io.atomic import check_output, same_file

__all__ = ["command", "main", "build_parser"]

# The command families, each registering its commands, in the order `nplm --help`
# lists them.
FAMILIES = ("query", "backoff", "neural", "compose", "prune", "files", "reproduce", "shim")
for _family in FAMILIES:
    importlib.import_module(f"nplm.cli.{_family}")


DESCRIPTION = ("Neural and Kneser-Ney n-gram language models with KenLM's tools: score text (query, "
               "perplexity), estimate like lmplz, build binaries, train neural models, interpolate, "
               "distil into back-off tables and convert between formats.  All probabilities are log10.")


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line naming the problem (the full usage is
    one --help away) instead of the usage block before the error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser():
    parser = _Parser(prog="nplm", description=DESCRIPTION,
                                     epilog="Run 'nplm COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"nplm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, cls) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        cls.add_arguments(p)
        output.add_options(p)
        if getattr(cls, "NON_ARPA_OUTPUTS", ()):
            p.add_argument("--force", action="store_true",
                           help="write the output even where its name says another kind of file (.arpa)")
        p.set_defaults(_run=cls.run, _outputs=getattr(cls, "OUTPUTS", ()), _inputs=getattr(cls, "INPUTS", ()),
                       _extra_positionals=getattr(cls, "EXTRA_POSITIONALS", None),
                       _non_arpa=getattr(cls, "NON_ARPA_OUTPUTS", ()))
    return parser


def _check_command(parser, argv):
    """An unknown command: a close match or the KenLM program it names, before
    argparse's list of every choice."""
    name = argv[0] if argv else "-"
    if name.startswith("-") or name in COMMANDS:
        return
    close = difflib.get_close_matches(name, COMMANDS, n=1)
    hint = f"; did you mean 'nplm {close[0]}'?" if close else ""
    parser.error(f"unknown command '{name}'{hint} (commands: {', '.join(COMMANDS)})")


def _check_unknown(parser, args, extra):
    """Arguments the command does not take, reported with that command's usage (argparse
    names the top-level parser) and the closest option of the command."""
    if not extra:
        return
    sub = parser._subparsers._group_actions[0].choices[args.command] if args.command else parser
    options = [o for a in sub._actions for o in a.option_strings]
    hints = []
    for word in extra:
        close = difflib.get_close_matches(word.split("=")[0], options, n=1) if word.startswith("-") else []
        hints += [f"{word}: did you mean {close[0]}?"] if close else []
    sub.error(f"unrecognized arguments: {' '.join(extra)}" + (f" ({'; '.join(hints)})" if hints else ""))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in KENLM_PROGRAMS and argv[0] not in COMMANDS:
        # nplm lmplz ...: KenLM's program with its own grammar (query and interpolate
        # are nplm's own commands; KenLM's are reached by their installed names)
        return run_kenlm_program(argv[0], argv[1:])
    parser = build_parser()
    _end_on_termination()
    _check_command(parser, argv)
    args, extra = parser.parse_known_args(argv)
    if getattr(args, "_extra_positionals", None):
        words = [w for w in extra if w == "-" or not w.startswith("-")]
        getattr(args, args._extra_positionals).extend(words)
        extra = [w for w in extra if not (w == "-" or not w.startswith("-"))]
    _check_unknown(parser, args, extra)
    args._argv = argv
    args._build_parser = build_parser
    output.configure(args)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        _check_outputs(args)        # a bad output name fails now, not after the work
        code = args._run(args) or 0
        sys.stdout.flush()      # a closed pipe shows here, not in the exit's flush
        return code
    except Signalled as e:          # SIGTERM, SIGHUP: cleaned up as for Ctrl-C
        print(f"nplm: ended by {signal.Signals(e.signum).name}", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        hint = ""
        if args.command == "train" and os.path.exists(args.out + ".ckpt"):
            hint = f"; {args.out}.ckpt holds the last finished epoch: add --resume to go on from it"
        print(f"nplm: interrupted{hint}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _output_closed()
    except (OSError, ValueError) as e:
        return error(_os_message(e))
    except MemoryError as e:
        return error(f"out of memory: {e}" if str(e) else "out of memory")


def _os_message(e):
    """An OSError that names a file reads 'FILE: why', without Python's '[Errno N]'."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        names = f"{e.filename} -> {e.filename2}" if e.filename2 is not None else f"{e.filename}"
        return f"{names}: {e.strerror}"
    return str(e)


def _check_outputs(args):
    """Each output can be written and is none of the command's inputs."""
    for name in args._outputs:
        out = getattr(args, name)
        if out is None or out == "-":
            continue
        check_output(out)
        if name in getattr(args, "_non_arpa", ()) and _named_arpa(out) and not args.force:
            raise ValueError(f"{out}: the name says ARPA, but nplm {args.command} writes a binary model there; "
                             "choose another name, or add --force")
        for input_name in args._inputs:
            sources = getattr(args, input_name, None)
            for src in sources if isinstance(sources, list) else [sources]:
                if src is not None and src != "-" and same_file(src, out):
                    raise ValueError(f"refusing to overwrite the input {src} with the output {out}")
                if src == "-" and _stdin_is(out):
                    raise ValueError(f"refusing to overwrite the input (standard input is {out}) with the output")


class Signalled(KeyboardInterrupt):
    """SIGTERM or SIGHUP (kill, timeout, systemd, Slurm, a closed terminal), raised
    where the command is, so that every cleanup Ctrl-C runs (temporary files, spill
    folders) runs for it too; main exits with 128 + the signal."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _raise_signalled(signum, frame):
    raise Signalled(signum)


def _end_on_termination():
    """SIGTERM and SIGHUP end a command as Ctrl-C does, where the program has not
    set handlers of its own (and only from the main thread, where Python can)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None and signal.getsignal(signum) in (signal.SIG_DFL, None):
            signal.signal(signum, _raise_signalled)


def _stdin_is(path):
    """Whether standard input is the file at ``path`` (``... --arpa t.txt < t.txt``)."""
    try:
        a, b = os.fstat(sys.stdin.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _output_closed():
    """The reader went away (``nplm query ... | head``): stop quietly, as a Unix tool
    killed by SIGPIPE does, with the status a shell reports for one (128 + 13).
    stdout now writes to /dev/null, so the interpreter's final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout without a descriptor (tests)
        pass
    return 141


def _named_arpa(path):
    """Whether a file name says ARPA text (model.arpa, model.arpa.gz, ...)."""
    name = os.path.basename(path).lower()
    return any(name.endswith(".arpa" + z) for z in ("", ".gz", ".bz2", ".xz"))
