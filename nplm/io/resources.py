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
