# A SIGBUS from a memory-mapped model file whose file was truncated becomes a Python
# exception instead of killing the process (nplm/src/mapguard.h).  container.read
# registers every mapping it makes; install() runs once, from the main thread.
from libc.stdint cimport uintptr_t

import signal
import sys
import threading
import weakref

from nplm.errors import FormatError

cdef extern from "mapguard.h":
    int nplm_guard_add(uintptr_t lo, uintptr_t hi)
    void nplm_guard_remove(uintptr_t lo)
    int nplm_guard_save_previous()
    int nplm_guard_install()
    uintptr_t nplm_guard_last_fault()

_PATHS = {}         # start address of a guarded mapping -> (end, path)
_installed = False


class MappedFileChanged(FormatError):
    """A page of a memory-mapped model file was read after the file was truncated.
    The model no longer has its data: reload it (or load with LoadMethod.READ)."""


def _raise_changed(signum, frame):
    fault = nplm_guard_last_fault()
    path = next((p for lo, (hi, p) in _PATHS.items() if lo <= fault < hi), None)
    raise MappedFileChanged("the model file was truncated while it was loaded (memory-mapped); "
                            "the model's scores are no longer valid: load it again", path)


def install():
    """Put the SIGBUS guard in place (once; only possible from the main thread,
    elsewhere mappings stay unguarded).  A program's own SIGBUS handler is kept."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread() or sys.version_info < (3, 10):
        return _installed       # (before 3.10 a signal handler cannot ask Python to run one)
    if signal.getsignal(signal.SIGBUS) not in (signal.SIG_DFL, None):
        return False
    nplm_guard_save_previous()
    signal.signal(signal.SIGBUS, _raise_changed)
    if nplm_guard_install() != 0:
        signal.signal(signal.SIGBUS, signal.SIG_DFL)
        return False
    _installed = True
    return True


def guard(mm, path):
    """Register the mmap object ``mm`` (a model file's mapping) until it is freed."""
    if mm is None or len(mm) == 0 or not install():
        return
    cdef const unsigned char[::1] view = mm
    cdef uintptr_t lo = <uintptr_t>&view[0]
    cdef uintptr_t hi = lo + <uintptr_t>view.shape[0]
    del view
    if nplm_guard_add(lo, hi) != 0:
        return
    _PATHS[lo] = (hi, path)
    weakref.finalize(mm, _unguard, lo)


def _unguard(lo):
    nplm_guard_remove(lo)
    _PATHS.pop(lo, None)
