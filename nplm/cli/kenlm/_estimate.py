"""lmplz's work: nplm's estimate with lmplz's inputs, outputs and exit codes."""

import io
import os

from nplm.backoff.estimate import DiscountError, estimate
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


def run_estimate(s):
    text = s.pop("text")
    arpa = s.pop("arpa")
    if text is not None and not os.path.exists(text):
        raise fail(f"No such file or directory while opening {text}")
    if arpa is not None and not os.path.isdir(os.path.dirname(os.path.abspath(arpa))):
        raise fail(f"No such file or directory while creating {arpa}")
    arpa = "-" if arpa is None else stream_target(arpa)
    order = s.pop("order")
    if order < 1:
        raise fail(f"the order must be at least 1, not {order}")
    try:
        estimate(stdin_named() if text is None else text, order, arpa=arpa, refuse_unk=True, **s)
    except DiscountError as e:
        raise fail(str(e).replace(" (Python: discount_fallback=True)", ""), ABORT_EXIT) from None
    except FormatError as e:
        raise fail(str(e), ABORT_EXIT if "not allowed in the" in str(e) else 1) from None
    return 0
