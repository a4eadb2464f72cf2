"""What every program under KenLM's names shares: errors as one line on stderr with
KenLM's exit codes, never a traceback."""

import functools
import os
import stat
import sys

from nplm.cli.kenlm._options import OptionError


class ProgramError(Exception):
    """A failure to report as ``message`` with exit code ``code``."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


def fail(message, code=1):
    return ProgramError(message, code)


def _message(e):
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.strerror or e} while opening {e.filename}"
    return str(e)


def program(name):
    """Decorate ``main(argv)``: OptionError, ProgramError, ValueError and OSError become
    a line on stderr and exit code 1 (or the error's own); Ctrl-C exits 130."""
    def wrap(main):
        @functools.wraps(main)
        def run(argv=None):
            try:
                code = main(argv) or 0
                sys.stdout.flush()
                return code
            except ProgramError as e:
                if str(e):
                    print(e, file=sys.stderr)
                return e.code
            except KeyboardInterrupt:
                return 130
            except BrokenPipeError:
                _silence_stdout()
                return 1
            except (OptionError, ValueError, OSError, MemoryError) as e:
                print(_message(e) or type(e).__name__, file=sys.stderr)
                return 1
        return run
    return wrap


def _silence_stdout():
    """After a closed pipe, point stdout at /dev/null so the exit's flush is quiet."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):
        pass


def stream_target(path):
    """An output name that is a device, pipe or socket (/dev/stdout, a FIFO) is opened
    and written in place, as KenLM does; a regular file is written atomically.  Returns
    '-' after pointing stdout at such a target, else ``path``."""
    if path == "-":
        return "-"
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return path
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return path
    fd = os.open(path, os.O_WRONLY)
    sys.stdout.flush()
    os.dup2(fd, sys.stdout.fileno())
    os.close(fd)
    return "-"
