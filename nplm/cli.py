"""``nplm <command>``: argument parsing and progress only; the work lives in the
library modules.  Each command registers itself with ``@command`` below; its
``add_arguments(parser)`` declares flags and its ``run(args)`` returns an exit code.
"""
import argparse
import sys

_COMMANDS = {}


def command(name, help):
    """Register ``cls`` (with ``add_arguments(p)`` and ``run(args)``) as a subcommand."""
    def register(cls):
        _COMMANDS[name] = (help, cls)
        return cls
    return register


def _error(message):
    print(f"nplm: error: {message}", file=sys.stderr)
    return 1


# --- commands are defined below, one class each -------------------------------------


def build_parser():
    parser = argparse.ArgumentParser(prog="nplm", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, cls) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        cls.add_arguments(p)
        p.set_defaults(_run=cls.run)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return args._run(args) or 0
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError) as e:
        return _error(str(e))
