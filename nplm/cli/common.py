"""What every ``nplm`` command shares: the registry that ``@command`` fills, the
plain error and warning lines, and the argument types of the flags."""
import argparse
import contextlib
import glob
import os
import stat
import sys
import warnings

from nplm.backoff.estimate import parse_size
from nplm.backoff.kenlm.reader import is_kenlm_binary
from nplm.compose.interpolate import is_spec
from nplm.io import container
from nplm.io.text import open_lines

COMMANDS = {}


def command(name, help):
    """Register ``cls`` (with ``add_arguments(p)`` and ``run(args)``) as a subcommand.
    ``cls.OUTPUTS`` names the arguments that are output files: main checks that they
    can be written before ``run`` starts the work, and that none of them is one of the
    files ``cls.INPUTS`` names (through links too: a command never overwrites its
    input)."""
    def register(cls):
        COMMANDS[name] = (help, cls)
        return cls
    return register


def error(message):
    print(f"nplm: error: {message}", file=sys.stderr)
    return 1


@contextlib.contextmanager
def plain_warnings():
    """The library's warnings inside the block, each printed once as a plain
    ``nplm: message`` line on stderr (not Python's file:line: category form)."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *rest, **kw: print(f"nplm: {message}", file=sys.stderr)
        yield


# --- commands are defined below, one class each -------------------------------------


def add_normalization(p):
    p.add_argument("--normalization", choices=["exact", "class", "tree", "unnormalized", "fallback"],
                   help="neural models only: how probabilities are normalised (default: the best exact "
                        "mode the model supports)")


def open_input_lines(path):
    # Words are bytes, as to KenLM: Latin-1 text scores against a Latin-1 model.
    return open_lines(path or "-")


QUERY_LEVELS = {"2": {"word", "sentence", "summary"}, "1": {"sentence", "summary"}, "0": {"summary"}}


def query_levels(values):
    """KenLM query's -v, in order: a name turns its output on, a number sets all three;
    nothing given means all three (lm/query_main.cc)."""
    levels = set()
    for v in values or ():
        levels = set(QUERY_LEVELS[v]) if v in QUERY_LEVELS else levels | {v}
    return levels or set(QUERY_LEVELS["2"])


def is_arpa(path):
    """Whether a model file that loaded was an ARPA file (not an nplm or KenLM binary,
    nor a spec)."""
    return not (container.is_container(path) or is_kenlm_binary(path) or is_spec(path))


def int_at_least(lowest, what):
    """An argparse type: an integer >= ``lowest``, called ``what`` in the error."""
    def parse(value):
        try:
            n = int(value)
        except ValueError:
            n = None
        if n is None or n < lowest:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, got {value!r}")
        return n
    return parse


def input_files(value):
    """An argparse type: an existing file, -, or a glob pattern that matches files."""
    if value != "-" and not os.path.exists(value) and glob.has_magic(value):
        if not glob.glob(value):
            raise argparse.ArgumentTypeError(f"no file matches {value!r}")
        return value
    return input_file(value)


def one_or_list(values):
    return values[0] if len(values) == 1 else list(values)


def memory_size(value):
    try:
        parse_size(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def input_file(value):
    """An argparse type: a file that exists (a pipe such as <(zcat t.gz) too), or -;
    argparse then names the option, before any model is loaded or banner printed."""
    if value != "-" and (not os.path.exists(value) or os.path.isdir(value)):
        raise argparse.ArgumentTypeError(f"no such file: {value!r}" if not os.path.exists(value)
                                         else f"not a file: {value!r}")
    return value


positive_int = int_at_least(1, "positive")
nonneg_int = int_at_least(0, "non-negative")


def positive_minutes(value):
    try:
        x = float(value)
    except ValueError:
        x = float("nan")
    if not 0 < x < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of minutes, got {value!r}")
    return x


def lmplz_bool(value):
    v = str(value).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected 0 or 1, got {value!r}")


def is_stream(path):
    """Whether ``path`` is stdin, a pipe, a FIFO or a device: readable once, so its
    format is sniffed from the one stream that then reads it."""
    if path == "-":
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode) and not os.path.isdir(path)
    except OSError:
        return False


def given_options(args):
    """The destinations of the options the command line gave explicitly: the same
    command line parsed again with every default suppressed."""
    parser = args._build_parser()
    for sub in parser._subparsers._group_actions[0].choices.values():
        for action in sub._actions:
            action.default = argparse.SUPPRESS
        sub._defaults.clear()
    return set(vars(parser.parse_args(args._argv)))


def add_text_argument(p, help, required=False):
    """The text a command reads, given as ``--text T`` or as the positional after the
    model, in every command alike."""
    p.add_argument("text_file", nargs="?", type=input_file, metavar="TEXT", help=help + " (or --text)")
    p.add_argument("--text", type=input_file, help=help)
    p.set_defaults(_text_required=required)


def text_of(args):
    """The text of ``add_text_argument``: one of the two forms, or stdin."""
    if args.text_file is not None and args.text is not None:
        raise ValueError(f"give the text once: {args.text_file} or --text {args.text}")
    text = args.text_file if args.text_file is not None else args.text
    if text is None and args._text_required:
        raise ValueError("no text: give TEXT after the model, or --text TEXT ('-' for stdin)")
    return text or "-"
