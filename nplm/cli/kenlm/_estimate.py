"""lmplz's work: nplm's estimate with lmplz's inputs, outputs and exit codes."""

import io
import os
import sys

from nplm.backoff.arpa import write_arpa
from nplm.backoff.estimate import DiscountError, estimate
from nplm.backoff.kenlm import intermediate
from nplm.cli.kenlm._program import ABORT, fail, stream_target
from nplm.errors import FormatError

# KenLM finds bad discounts and special words in worker threads, whose uncaught
# exceptions abort the program
ABORT_EXIT = ABORT


def stdin_named():
    """Standard input, named as KenLM names it: the file it reads, else "stdin"."""
    try:
        name = os.readlink("/proc/self/fd/0")
    except OSError:
        name = ""
    raw = io.FileIO(0, "rb", closefd=False)
    raw.name = name if name.startswith("/") else "stdin"
    return io.BufferedReader(raw, 1 << 20)


def _creatable(path):
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise fail(f"No such file or directory while creating {path}")


def _resolved(path):
    """``path`` through its links where that names a regular file (not a pipe's
    /dev/stdin, which is read by its own name)."""
    real = os.path.realpath(path)
    return real if os.path.isfile(real) else path


def run_estimate(s):
    text = s.pop("text")
    arpa = s.pop("arpa")
    base = s.pop("intermediate", None)
    renumber = s.pop("renumber", False) or base is not None
    if text is not None and not os.path.exists(text):
        raise fail(f"No such file or directory while opening {text}")
    if base is not None:
        _creatable(base + ".vocab")
    if arpa is not None:
        _creatable(arpa)
    # --intermediate writes no ARPA unless --arpa names one
    arpa = None if base is not None and arpa is None else "-" if arpa is None else stream_target(arpa)
    order = s.pop("order")
    if order < 1:
        raise fail(f"the order must be at least 1, not {order}")
    # (named as KenLM names its input, by the path its descriptor resolves to: the
    # verbose header's "Input file")
    text = stdin_named() if text is None else _resolved(text)
    try:
        if not renumber:
            estimate(text, order, arpa=arpa, refuse_unk=True, **s)
            return 0
        # the model in lmplz --renumber's numbering and order: the ARPA's lines
        # follow it, and the intermediate files hold it
        model = estimate(text, order, refuse_unk=True, **s)
        numbering = intermediate.Renumbering(model)
        if base is not None:
            intermediate.write(base, model, b"q" if s["collapse_values"] else b"pb", numbering)
        if arpa is not None:
            model = intermediate.renumbered(model, numbering)
            write_arpa(model, sys.stdout.buffer if arpa == "-" else arpa)
    except DiscountError as e:
        raise fail(str(e).replace(" (Python: discount_fallback=True)", ""), ABORT_EXIT) from None
    except FormatError as e:
        raise fail(str(e), ABORT_EXIT if "not allowed in the" in str(e) else 1) from None
    return 0
