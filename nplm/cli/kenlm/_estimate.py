"""lmplz's work: nplm's estimate with lmplz's inputs, outputs and exit codes."""

import os
import sys

from nplm.cli.kenlm._program import fail, stream_target

# KenLM finds bad discounts in a worker thread, and the uncaught exception aborts
DISCOUNT_EXIT = 134


def run_estimate(s):
    from nplm.backoff.estimate import DiscountError, estimate

    text = s.pop("text")
    arpa = s.pop("arpa")
    if text is not None and not os.path.isfile(text) and not os.path.exists(text):
        raise fail(f"No such file or directory while opening {text}")
    if arpa is not None and not os.path.isdir(os.path.dirname(os.path.abspath(arpa))):
        raise fail(f"No such file or directory while creating {arpa}")
    arpa = "-" if arpa is None else stream_target(arpa)
    order = s.pop("order")
    if order < 1:
        raise fail(f"the order must be at least 1, not {order}")
    try:
        estimate(sys.stdin.buffer if text is None else text, order, arpa=arpa, **s)
    except DiscountError as e:
        raise fail(str(e), DISCOUNT_EXIT) from None
    return 0
