"""What an output path is, known without the heavier machinery of nplm.io.atomic (the
programs under KenLM's names that write through file descriptors import only this):
whether it must be written in place, and the prefix of the temporary files that
atomic writers rename over their outputs."""
import os
import stat

TMP_PREFIX = ".nplm-tmp-"


def written_in_place(path):
    """Whether an output path names something other than a regular file to replace:
    a device, FIFO or socket, or a path in or a link into /dev or /proc (/dev/stdout)."""
    path = os.fspath(path)
    if os.path.abspath(path).startswith(("/dev/", "/proc/")) or \
            os.path.islink(path) and os.path.realpath(path).startswith(("/proc/", "/dev/")):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)
