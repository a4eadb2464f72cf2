# Thread counts for the kernels' OpenMP teams, and OpenMP after fork.  Every kernel
# module shares the process's one OpenMP runtime, so one at-fork handler here covers
# them all; nplm._kernels imports this module, so it is in place before any kernel runs.
import os

from cpython.number cimport PyNumber_Index
from openmp cimport omp_set_max_active_levels


# The most threads any call may ask for.  A larger number is a mistake, not a
# machine: OpenMP would try to start that many threads (10**9 made libgomp abort
# the interpreter, 100,000 crashed it).
MAX_THREADS = 1024


def cpu_count():
    """The CPUs this process may run on (its affinity mask where there is one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def thread_count(threads):
    """The thread team for a request of ``threads``: an integer from 1 to
    MAX_THREADS (TypeError / ValueError otherwise), capped at the CPUs this
    process may use -- more threads than that only add start-up cost (5,000
    threads took 12 s for 100 sentences) to kernels that are compute-bound."""
    if isinstance(threads, bool):
        raise TypeError(f"threads must be an integer, not {threads!r}")
    try:
        n = PyNumber_Index(threads)     # operator.index, without importing operator
    except TypeError:
        raise TypeError(f"threads must be an integer, not {threads!r}") from None
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"threads must be from 1 to {MAX_THREADS}, not {n}")
    return min(n, cpu_count())


def _serial_after_fork():
    """In a child process, on the thread that called fork: no OpenMP team.

    GNU OpenMP keeps each thread's team of worker threads for its next parallel
    region, and fork copies only the calling thread: the child's first parallel
    region on that thread waited for workers that exist only in the parent (a
    multiprocessing pool forked after a batch call hung).  Setting this thread's
    max-active-levels to 0 makes every parallel region on it -- whichever kernel
    module runs it, with or without a num_threads clause -- run on the thread
    alone.  Threads the child starts have fresh teams and run in parallel as
    before.  OpenBLAS has its own at-fork handler."""
    omp_set_max_active_levels(0)


os.register_at_fork(after_in_child=_serial_after_fork)
