"""Writing files atomically (temporary file + rename), text outputs, and the
checks every writer makes before it starts (output names, stdout, self-overwrite);
folders of temporary files that vanish on success, failure and Ctrl-C."""
import atexit
import contextlib
import errno
import gzip
import importlib
import io
import os
import shutil
import signal
import socket
import sys
import threading
import time

from nplm.io.places import TMP_PREFIX, written_in_place


def check_output(path):
    """Raise OSError naming ``path`` (not a temporary file) when it cannot be an output
    file: it is a directory, or its directory does not exist.  Commands call it before
    their work, so that a bad name does not wait for the end of a long run."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(errno.EISDIR, "Is a directory, not a file name for the output", path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(errno.ENOENT, "No such directory for the output", directory)


class atomic_write:
    """``with atomic_write(path) as f:`` writes ``path`` through a temporary file in
    the same directory, renamed into place only when the block finishes without an
    exception.  A killed process leaves at most a ``.nplm-tmp-*`` file behind, never
    a half-written ``path``; an exception or Ctrl-C leaves nothing.

    A class rather than a generator: with @contextmanager, a Ctrl-C landing inside
    __enter__ after the file exists (but before the with block is set up) skipped
    the cleanup.  A Ctrl-C can still land as __exit__ or _discard is entered (Python
    checks for signals on entering a function), before their cleanup runs: every
    temporary file in flight is also listed in _LIVE, which an exit handler clears."""

    def __init__(self, path, mode="wb"):
        self.path = os.fspath(path)
        self.mode = mode
        self.tmp = None
        self.file = None

    def __enter__(self):
        check_output(self.path)
        if written_in_place(self.path):
            # a device, pipe or socket (/dev/null, /dev/stdout, a FIFO a reader waits
            # on) is written as it is, streaming, as KenLM's programs do: renaming a
            # file over it would replace the node
            try:
                self.file = open(self.path, self.mode)
            except OSError as e:
                raise type(e)(e.errno, e.strerror, self.path) from None
            return self.file
        directory = os.path.dirname(os.path.abspath(self.path))
        remove_stale(directory)
        _terminate_cleanly()
        # Hold SIGINT/SIGTERM while the file is created and opened, so that no
        # signal lands between its creation and our knowing its name; one that
        # arrived meanwhile is delivered at the unblock, and cleaned up after.
        # The mask is per thread, though: with other threads running, a Ctrl-C can
        # still be handled here; so the name is chosen and listed in _LIVE before the
        # file exists (mkstemp could be interrupted after creating it, name unknown).
        held = _block_signals()
        try:
            fd = None
            while fd is None:
                self.tmp = os.path.join(directory, ".nplm-tmp-%s-%s" % (os.urandom(6).hex(),
                                                                       os.path.basename(self.path)))
                _LIVE.add(self.tmp)
                try:
                    fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                                 0o600)
                except FileExistsError:
                    _LIVE.discard(self.tmp)
                except OSError as e:   # name the output, not our temporary file
                    raise type(e)(e.errno, e.strerror, self.path) from None
            self.file = os.fdopen(fd, self.mode)
        except BaseException:
            _unblock_signals(held)
            self._discard()
            raise
        try:
            _unblock_signals(held)
        except BaseException:
            self._discard()
            raise
        return self.file

    def __exit__(self, exc_type, exc, tb):
        if self.tmp is None and self.file is not None:        # written in place
            try:
                self.file.close()
            except OSError as e:
                if exc_type is None:
                    raise type(e)(e.errno, e.strerror, self.path) from e
            if isinstance(exc, OSError) and exc.errno in _WRITE_ERRORS and exc.filename is None:
                raise type(exc)(exc.errno, exc.strerror, self.path) from exc
            return False
        if exc_type is not None:
            self._discard()
            if isinstance(exc, OSError) and exc.errno in _WRITE_ERRORS and exc.filename is None:
                raise type(exc)(exc.errno, exc.strerror, self.path) from exc    # name the output
            return False
        try:
            try:
                self.file.flush()
                os.fsync(self.file.fileno())
                self.file.close()
            except OSError as e:
                if e.errno in _WRITE_ERRORS and e.filename is None:
                    raise type(e)(e.errno, e.strerror, self.path) from e
                raise
            # mkstemp creates 0600; give the result the usual permissions.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(self.tmp, 0o666 & ~umask)
            try:
                os.replace(self.tmp, self.path)
            except OSError as e:
                raise type(e)(e.errno, e.strerror, self.path) from None
            _LIVE.discard(self.tmp)
        except BaseException:
            self._discard()
            raise
        _default_termination()
        return False

    def _discard(self):
        if self.file is not None:
            with contextlib.suppress(Exception):
                self.file.close()
        if self.tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
            _LIVE.discard(self.tmp)
        _default_termination()


_LIVE = set()       # temporary files of atomic_write blocks not yet renamed or removed
# A write that fails for want of room (disk full, quota, file size limit) is named
# after the output, not left as "[Errno 28] No space left on device".
_WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
STALE_SECONDS = 24 * 3600


def remove_stale(directory):
    """Remove the temporary files that writers killed outright (SIGKILL, power loss)
    left in ``directory`` more than a day ago; a newer one may belong to a writer
    still running."""
    cutoff = time.time() - STALE_SECONDS
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(TMP_PREFIX) or os.path.join(directory, entry.name) in _LIVE:
            continue
        with contextlib.suppress(OSError):
            if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.path)


class Terminated(SystemExit):
    """SIGTERM arrived while a file was being written: raised like Ctrl-C's
    KeyboardInterrupt, so the write's temporary file is removed on the way out; the
    process then exits with status 143 (128 + SIGTERM), as SIGTERM's default would."""

    def __init__(self):
        super().__init__(128 + signal.SIGTERM)


def _raise_terminated(signum, frame):
    raise Terminated()


def _terminate_cleanly():
    """From the main thread, while SIGTERM has its default action (which would kill
    the process without removing temporary files), make it raise Terminated.  A
    handler the program installed itself is left alone."""
    if (hasattr(signal, "SIGTERM") and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
        signal.signal(signal.SIGTERM, _raise_terminated)


def _default_termination():
    """When no write is in flight any more, SIGTERM's default action again."""
    if (not _LIVE and hasattr(signal, "SIGTERM") and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is _raise_terminated):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@atexit.register
def _remove_live():
    """At interpreter exit (a Ctrl-C that escaped __exit__'s cleanup included)."""
    for tmp in list(_LIVE):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    _LIVE.clear()


class temp_folder:
    """``with temp_folder(parent) as folder:`` a fresh folder for temporary files
    under ``parent``, removed with all it holds when the block ends (normally, by an
    exception or by Ctrl-C) and, failing that, at interpreter exit.  Like
    ``atomic_write``, the name is listed before the folder exists.  A marker file
    names the owning process, so that the next folder made under ``parent`` removes
    the folders of processes killed outright (SIGKILL, the out-of-memory killer).

    ``folder.save(name, array)`` writes an array into it and turns a full disk into
    an OSError(ENOSPC) that names the folder and the bytes needed."""

    def __init__(self, parent, prefix="nplm-"):
        self.parent = os.fspath(parent)
        self.prefix = prefix
        self.path = None

    def __enter__(self):
        remove_orphans(self.parent)
        held = _block_signals()
        try:
            while self.path is None:
                path = os.path.join(self.parent, self.prefix + os.urandom(6).hex())
                _LIVE_FOLDERS.add(path)
                try:
                    os.mkdir(path, 0o700)
                    self.path = path
                except FileExistsError:
                    _LIVE_FOLDERS.discard(path)
                except OSError:
                    _LIVE_FOLDERS.discard(path)
                    raise
            with open(os.path.join(self.path, OWNER), "w") as f:
                f.write(_owner())
        except BaseException:
            self.remove()
            raise
        finally:
            _unblock_signals(held)
        return self

    def __exit__(self, exc_type, exc, tb):
        self.remove()
        return False

    def remove(self):
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            _LIVE_FOLDERS.discard(self.path)

    def file(self, name):
        return os.path.join(self.path, name)

    def save(self, name, array):
        """Write ``array`` as ``name`` (.npy); returns the file's path."""
        path = self.file(name + ".npy")
        need = array.nbytes + 4096
        free = shutil.disk_usage(self.path).free
        if need > free:
            raise self.full(need - free)
        # numpy on first use: the programs that only write text start without it
        np = importlib.import_module("numpy")

        held = _block_signals()     # (a signal between open and with would leave it unclosed)
        try:
            with open(path, "wb") as f:
                _unblock_signals(held)
                held = None
                np.save(f, array)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise self.full(need) from None
            raise
        finally:
            _unblock_signals(held)
        return path

    def check_space(self, need):
        """Raise the ENOSPC error now when ``need`` bytes will not fit."""
        free = shutil.disk_usage(self.path).free
        if need + 4096 > free:
            raise self.full(need + 4096 - free)

    def write(self, f, array):
        """Write the bytes of ``array`` to the open file ``f`` in the folder."""
        np = importlib.import_module("numpy")

        try:
            if array.nbytes:
                f.write(memoryview(np.ascontiguousarray(array).reshape(-1)).cast("B"))
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise self.full(array.nbytes) from None
            raise

    def full(self, need):
        return OSError(errno.ENOSPC, f"no space left for temporary files in {self.parent}: "
                       f"about {need / (1 << 20):.1f} MiB more needed (set the folder with -T)",
                       self.parent)

    def load(self, name, mmap=True):
        np = importlib.import_module("numpy")

        return np.load(self.file(name + ".npy"), mmap_mode="r" if mmap else None)

    def delete(self, name):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.file(name + ".npy"))

    def disk_bytes(self):
        """Bytes the folder's files take now."""
        total = 0
        for entry in os.scandir(self.path):
            with contextlib.suppress(OSError):
                total += entry.stat().st_size
        return total


OWNER = ".nplm-owner"     # in a temp_folder: "host pid start-time" of the process that made it


def _start_time(pid):
    """The process's start time in clock ticks since boot (Linux), or "" when unknown:
    with the pid, it tells a process from a later one that reuses its number."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def _owner():
    return f"{socket.gethostname()} {os.getpid()} {_start_time(os.getpid())}\n"


def _owner_gone(folder):
    """True when ``folder``'s marker names a process of this host that has ended."""
    try:
        with open(os.path.join(folder, OWNER)) as f:
            host, pid, *start = f.read().split()
        pid = int(pid)
    except (OSError, ValueError):
        return False        # no marker (yet), or not ours
    if host != socket.gethostname() or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:         # alive, another user's
        return False
    return bool(start) and _start_time(pid) not in ("", start[0])


def remove_orphans(parent):
    """Remove the temporary folders under ``parent`` whose process was killed before it
    could remove them, saying so on stderr with the room freed."""
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith("nplm-") and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for entry in entries:
        if entry.path in _LIVE_FOLDERS or not _owner_gone(entry.path):
            continue
        size = _tree_bytes(entry.path)
        shutil.rmtree(entry.path, ignore_errors=True)
        if not os.path.exists(entry.path):
            print(f"nplm: removed {entry.path} ({size / (1 << 20):.1f} MiB), the temporary files of a "
                  "process that was killed", file=sys.stderr)


def _tree_bytes(path):
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


_LIVE_FOLDERS = set()   # temp_folder folders not yet removed


@atexit.register
def _remove_live_folders():
    for path in list(_LIVE_FOLDERS):
        shutil.rmtree(path, ignore_errors=True)
    _LIVE_FOLDERS.clear()


_SIGNALS = {getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)}


def _block_signals():
    if hasattr(signal, "pthread_sigmask"):
        return signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    return None


def _unblock_signals(held):
    if held is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


_COMPRESSORS = {".gz": "gzip", ".bz2": "bz2", ".xz": "lzma"}


def is_stdio(path):
    return path is not None and not hasattr(path, "write") and os.fspath(path) in ("-", b"-")


def refuse_stdout(path, what="an nplm binary", hint=""):
    """A ValueError for '-' as the name of a binary output: a binary is memory-mapped
    from a file, so it cannot go to a pipe (text outputs take '-' as stdout)."""
    if is_stdio(path):
        raise ValueError(f"cannot write {what} to stdout ('-'): it is memory-mapped from a file, "
                         "so give a file name" + hint)


@contextlib.contextmanager
def text_output(path, text=False):
    """``with text_output(path) as f:`` the writer of every text output (ARPA, classes,
    sampled text): '-' is stdout (flushed, left open); a path is written atomically
    and compressed by its extension (.gz, .bz2, .xz).  ``f`` takes bytes, or str
    (UTF-8, \\n newlines) with ``text``."""
    if is_stdio(path):
        raw = sys.stdout.buffer
        f = io.TextIOWrapper(raw, "utf-8", newline="\n") if text else raw
        yield f
        f.flush()
        if f is not raw:
            f.detach()      # (closing the wrapper would close stdout)
        return
    ext = os.path.splitext(os.fspath(path))[1].lower()
    with atomic_write(path, "wb") as raw:
        if ext == ".gz":
            # mtime 0 and no name: the same content gives the same bytes
            comp = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0, filename="")
        elif ext in _COMPRESSORS:
            comp = __import__(_COMPRESSORS[ext]).open(raw, "wb")
        else:
            comp = raw
        f = io.TextIOWrapper(comp, "utf-8", newline="\n") if text else comp
        try:
            yield f
            f.flush()
        finally:
            if f is not comp:
                f.detach()
            if comp is not raw:
                comp.close()    # the compressed stream's end; atomic_write closes raw


def same_file(a, b):
    """True when paths ``a`` and ``b`` name the same existing file (used to refuse
    overwriting a command's own input)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
