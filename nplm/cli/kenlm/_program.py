"""What every program under KenLM's names shares: errors as one line on stderr with
KenLM's exit codes, never a traceback."""

import os
import sys
import warnings

from nplm.io.places import written_in_place

# KenLM's programs abort (SIGABRT) on errors raised in their worker threads or left
# uncaught; a shell shows the exit status 134
ABORT = 134


class OptionError(Exception):
    """A command line boost would refuse; the message is boost's text, ``kind`` the
    name of boost's exception class."""

    def __init__(self, message, kind="error"):
        super().__init__(message)
        self.kind = f"boost::wrapexcept<boost::program_options::{kind}>"


class ProgramError(Exception):
    """A failure to report as ``message`` with exit code ``code``."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


class GetoptError(Exception):
    """A command line glibc's getopt refuses; the message is glibc's, without the
    program's name: "invalid option -- 'x'" or "option requires an argument -- 'v'"."""


def gnu_getopt(argv, spec):
    """glibc's getopt(3) over ``argv`` (without the program's name) for the short
    options of ``spec`` ("bnv:l:"), as KenLM's query and build_binary call it: the
    options in order as (flag, value) pairs ('' for a flag without a value), then the
    other arguments, which options may follow (GNU's permutation); "--" ends the
    options and "-" is an argument.  With no long options, "--foo" is the option
    letters '-', 'f', ... (glibc reports '-').  The getopt module would cost this
    path its import of re and gettext, a fifth of query's start."""
    opts, rest = [], []
    args = iter(argv)
    for arg in args:
        if arg == "--":
            rest.extend(args)
            break
        if len(arg) < 2 or arg[0] != "-":
            rest.append(arg)
            continue
        i = 1
        while i < len(arg):
            letter = arg[i]
            at = spec.find(letter) if letter != ":" else -1
            if at < 0:
                raise GetoptError(f"invalid option -- '{letter}'")
            if spec[at + 1:at + 2] != ":":
                opts.append(("-" + letter, ""))
                i += 1
                continue
            value = arg[i + 1:] or next(args, None)
            if value is None:
                raise GetoptError(f"option requires an argument -- '{letter}'")
            opts.append(("-" + letter, value))
            break
    return opts, rest


def fail(message, code=1):
    return ProgramError(message, code)


def _message(e):
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.strerror or e} while opening {e.filename}"
    return str(e)


def program(name):
    """Decorate ``main(argv)``: OptionError, ProgramError, ValueError and OSError become
    a line on stderr and exit code 1 (or the error's own); Ctrl-C exits 130; the
    library's warnings (an ARPA's repeated n-gram, ...) are their message alone."""
    def wrap(main):
        def run(argv=None):
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return _run(main, argv)
        return _wraps(run, main)
    return wrap


def _show_warning(message, *rest, **kwargs):
    print(message, file=sys.stderr)


def _run(main, argv):
    try:
        code = main(argv) or 0
        sys.stdout.flush()
        return code
    except ProgramError as e:
        if str(e):
            print(e, file=sys.stderr)
        if e.code == ABORT:
            abort()
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except (OptionError, ValueError, OSError, MemoryError) as e:
        print(_message(e) or type(e).__name__, file=sys.stderr)
        return 1


def _wraps(wrapper, wrapped):
    """functools.wraps without importing functools (and with it collections, a
    millisecond or two of the query program's start)."""
    for attr in ("__module__", "__name__", "__qualname__", "__doc__", "__annotations__"):
        setattr(wrapper, attr, getattr(wrapped, attr))
    wrapper.__dict__.update(wrapped.__dict__)
    wrapper.__wrapped__ = wrapped
    return wrapper


def abort():
    """Die of SIGABRT as KenLM's program does, leaving no core file."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    os.abort()


def _silence_stdout():
    """After a closed pipe, point stdout at /dev/null so the exit's flush is quiet."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):
        pass


def in_place(path):
    """Whether output ``path`` must be opened and written where it is, as KenLM writes
    every output, rather than through a temporary file renamed over it: a symbolic link
    (/dev/stdout is one; the rename would replace the link), or what every nplm writer
    writes in place (nplm.io.places.written_in_place: devices, pipes, /dev, /proc)."""
    return os.path.islink(path) or written_in_place(path)


def open_in_place(path):
    """``path`` opened for writing as KenLM's CreateOrThrow opens it."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)


def stream_target(path):
    """The name to hand the library for output ``path``: '-' after pointing stdout at
    ``path`` where it must be written in place (see ``in_place``), else ``path``, which
    the library writes atomically."""
    if path == "-" or not in_place(path):
        return path
    fd = open_in_place(path)
    sys.stdout.flush()
    os.dup2(fd, sys.stdout.fileno())
    os.close(fd)
    return "-"
