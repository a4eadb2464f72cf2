"""How every command talks on stderr.

* Progress bars (tqdm, one style for every command) are drawn only when stderr is a
  terminal: a pipe or a log file gets no carriage-return updates.
* ``-q/--quiet`` turns progress off (bars, stage banners, statistics, notes); warnings
  and errors stay, and so does the output the command was asked for.
* Messages go through the ``nplm`` logger: notes at INFO, shown by default; ``--verbose``
  adds DEBUG detail.
"""
import logging
import sys

log = logging.getLogger("nplm")


def stderr_is_terminal():
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):     # replaced or closed stderr
        return False


def add_options(parser):
    """``-q/--quiet`` and ``--verbose`` on a command's parser (``-q`` only where the
    command has no ``-q`` of its own)."""
    taken = {option for action in parser._actions for option in action.option_strings}
    if "--quiet" not in taken:
        names = ("--quiet",) if "-q" in taken else ("-q", "--quiet")
        parser.add_argument(*names, action="store_true",
                            help="no progress bars, banners or statistics on stderr")
    if "--verbose" not in taken:
        parser.add_argument("--verbose", action="store_true", help="more detail on stderr")


class _StderrHandler(logging.Handler):
    """Writes to the sys.stderr of the moment (tests and callers may replace it)."""

    def emit(self, record):
        try:
            print(self.format(record), file=sys.stderr, flush=True)
        except Exception:                      # noqa: BLE001 (logging must not raise)
            self.handleError(record)


def configure(args):
    """Set up the ``nplm`` logger for this command and decide ``args.progress``: bars only
    when asked for (no ``--quiet``) and stderr is a terminal."""
    quiet, verbose = getattr(args, "quiet", False), getattr(args, "verbose", False)
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    log.propagate = False
    args.progress = not quiet and stderr_is_terminal()
    return args.progress
