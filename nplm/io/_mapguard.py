# A SIGBUS from a memory-mapped model file whose file was truncated becomes a Python
# exception instead of killing the process (nplm/src/mapguard.h, whose state
# nplm._kernels holds).  container.read and the KenLM reader register every mapping
# they make; Model(path) collects the mappings its load made (``collecting``), and its
# scoring methods raise MappedFileChanged when one of them lost a page, in whichever
# thread scores.
import contextlib
import signal
import threading
import weakref

from nplm import _kernels
from nplm.errors import MappedFileChanged  # noqa: F401 (its historical home)

_state = threading.local()     # .collectors: the lists of the loads under way in this thread
_installed = None


def install():
    """Put the guard in place (once, from any thread).  A program's own Python SIGBUS
    handler is kept: then mappings stay unguarded."""
    global _installed
    if _installed is None:
        own = signal.getsignal(signal.SIGBUS) not in (signal.SIG_DFL, None)
        _installed = not own and _kernels.guard_install()
    return _installed


def guard(mm, path):
    """Register the mmap object ``mm`` (a model file's mapping) until it is freed, and
    give it to the loads collecting in this thread."""
    if mm is None or len(mm) == 0 or not install():
        return
    registered = _kernels.guard_add(mm)
    if registered is None:
        return
    slot, lo = registered
    weakref.finalize(mm, _kernels.guard_remove, slot, lo)
    for collector in getattr(_state, "collectors", ()):
        collector.append((slot, lo, path))


@contextlib.contextmanager
def collecting():
    """The (slot, address, path) of every mapping registered in this thread inside
    the block (nested blocks each see them): what a model's load mapped."""
    mapped = []
    stack = getattr(_state, "collectors", None)
    if stack is None:
        stack = _state.collectors = []
    stack.append(mapped)
    try:
        yield mapped
    finally:
        stack.pop()             # (blocks nest: this one is the last)
