"""Refusing loads that cannot fit in memory, before they start.

Populating a mapped binary (MAP_POPULATE, the default load) or reading an ARPA
file into memory on a machine without the room does not fail: it swaps the
machine to death.  These checks compare what a load will need with the kernel's
MemAvailable first and raise a clear OSError (ENOMEM) instead.  Where there is no
/proc/meminfo (not Linux) nothing is checked.
"""
import errno
import os
import re
import stat
import sys
from concurrent.futures import ThreadPoolExecutor

from nplm.io.files import open_binary

# Bytes per n-gram while an ARPA file loads, a deliberate under-estimate (so a
# load that would fit is never refused): the parsed ids, probability and
# back-off (4n + 8), plus the probing table entry (16 bytes x 1.45 for middle
# orders, 12 x 1.45 for the highest).  Unigrams also hold a Python string and a
# vocabulary hash slot.
_UNIGRAM_BYTES = 96


def ngram_bytes(n, highest):
    return 4 * n + 8 + (17 if highest else 23)


def mem_available():
    """The kernel's estimate of memory available without swapping, in bytes
    (None where it cannot be read)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _gib(n):
    return f"{n / (1 << 30):.1f} GiB"


def check_available(needed, what, advice):
    """Raise OSError(ENOMEM) when ``needed`` bytes exceed MemAvailable."""
    avail = mem_available()
    if avail is not None and needed > avail:
        raise OSError(errno.ENOMEM, f"{what} needs about {_gib(needed)} of memory but only "
                                    f"{_gib(avail)} is available; {advice}")


def binary_fits(path):
    """Whether ``path`` fits in the available memory (True where unknown)."""
    avail = mem_available()
    return avail is None or os.path.getsize(path) <= avail


def check_binary_populate(path):
    """Before mapping ``path`` with MAP_POPULATE (which reads all of it in)."""
    check_available(os.path.getsize(path), "loading this binary into memory",
                    "load it with nplm.Config().load_method = nplm.LoadMethod.LAZY to map it "
                    "without reading it in (pages are then read on first use)")


_COUNT = re.compile(rb"^ngram\s+(\d+)\s*=\s*(\d+)\s*$")


def arpa_header_counts(path, limit=1 << 16):
    """The n-gram counts of an ARPA file's header (plain or compressed), read from
    its first ``limit`` bytes; None when they cannot be made out (the ARPA reader
    then reports the problem properly; and for stdin, which can be read only once)."""
    if path in (None, "-"):
        return None
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None     # a pipe or stdin: reading its head here would consume it
        with open_binary(path) as f:
            head = f.read(limit)
    except (OSError, EOFError, ValueError):
        return None
    counts = {}
    started = False
    for raw in head.split(b"\n")[:-1] if len(head) == limit else head.split(b"\n"):
        line = raw.strip()
        if not started:
            started = line == b"\\data\\"
            continue
        if not line:
            if counts:
                break
            continue
        m = _COUNT.match(line)
        if not m:
            break
        counts[int(m.group(1))] = int(m.group(2))
    if not counts or sorted(counts) != list(range(1, len(counts) + 1)):
        return None
    return [counts[k] for k in range(1, len(counts) + 1)]


def check_arpa(path):
    """Before reading an ARPA file: its header counts must fit in memory."""
    if path in (None, "-"):
        return
    counts = arpa_header_counts(path)
    if counts is None:
        return
    order = len(counts)
    needed = counts[0] * _UNIGRAM_BYTES + sum(c * ngram_bytes(n, n == order)
                                              for n, c in enumerate(counts[1:], 2))
    check_available(needed, f"the ARPA header's {sum(counts):,} n-grams",
                    "use a machine with more memory, or prune the model")


def l3_cache_bytes(default=32 << 20):
    """Size of the CPU's last-level (L3) cache from sysfs, or ``default`` where it
    cannot be read.  Kernels use it to tell weights that stay cached between queries
    from weights that come from DRAM each time."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            with open(os.path.join(base, entry, "level")) as f:
                if f.read().strip() != "3":
                    continue
            with open(os.path.join(base, entry, "size")) as f:
                m = re.fullmatch(r"(\d+)([KMG]?)", f.read().strip())
            if m:
                return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]
    except (OSError, ValueError):
        pass
    return default


# OpenBLAS (scipy's, behind the neural kernels) mallocs a 32 MiB work buffer per
# thread, when it loads and on its first product, and retries without end when an
# address-space limit (ulimit -v, RLIMIT_AS) refuses one: a neural load under a
# ~200 MB limit hung.  These leave it room, or refuse with a clear error.
BLAS_BUFFER_BYTES = 64 << 20    # a thread's buffer (32 MiB + 4 KiB), and as much for what a product allocates
BLAS_LOAD_BYTES = 128 << 20     # mapping scipy's BLAS and a first buffer (measured: 97 MiB, one thread)


def address_space_left():
    """Bytes of address space this process may still map under RLIMIT_AS (None
    when there is no limit or it cannot be read)."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
        return soft - pages * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError, IndexError):
        return None


def prepare_blas():
    """Before the neural kernels load scipy's OpenBLAS (nplm.neural._blas.bind): when
    the address space left holds fewer work buffers than there are CPUs, make it one
    thread (OPENBLAS_NUM_THREADS=1, unless the user chose a count); when it cannot
    hold the library at all, OSError(ENOMEM) now instead of a hang inside it."""
    left = address_space_left()
    if left is None or any(name.startswith("scipy.linalg") for name in sys.modules):
        return
    if "OPENBLAS_NUM_THREADS" not in os.environ and left < BLAS_BUFFER_BYTES * (os.cpu_count() or 1) + BLAS_LOAD_BYTES:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if left < BLAS_LOAD_BYTES:
        raise OSError(errno.ENOMEM, f"the address-space limit (ulimit -v) leaves {left >> 20} MiB, but loading the "
                                    f"BLAS library of the neural kernels takes about {BLAS_LOAD_BYTES >> 20} MiB "
                                    "(OpenBLAS would hang, not fail); raise the limit")


def check_blas_room(threads):
    """Raise OSError(ENOMEM) when the address space left cannot hold BLAS work
    buffers for ``threads`` threads."""
    left = address_space_left()
    need = BLAS_BUFFER_BYTES * max(1, threads)
    if left is not None and left < need:
        raise OSError(errno.ENOMEM, f"the address-space limit (ulimit -v) leaves {left >> 20} MiB, but the BLAS "
                                    f"library of the neural kernels needs about {need >> 20} MiB for its work "
                                    "buffers; raise the limit")


_NO_THREAD = ("cannot start a thread: the address-space or process limit is reached (ulimit -v / -u); "
              "raise it, or run where more memory is free")


def start_thread(thread):
    """``thread.start()``, a thread the limits do not allow being a MemoryError saying
    so (Python raises RuntimeError("can't start new thread"))."""
    try:
        thread.start()
    except RuntimeError as e:
        if "can't start new thread" not in str(e):
            raise
        raise MemoryError(_NO_THREAD) from None


class ThreadPool(ThreadPoolExecutor):
    """ThreadPoolExecutor whose submit (which starts the threads) reports a thread the
    limits do not allow as start_thread does."""

    def submit(self, *args, **kwargs):
        try:
            return super().submit(*args, **kwargs)
        except RuntimeError as e:
            if "can't start new thread" not in str(e):
                raise
            raise MemoryError(_NO_THREAD) from None
