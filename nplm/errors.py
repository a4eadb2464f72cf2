"""Exception types.  Every reader raises one of these, naming the file and line."""
import contextvars


class FormatError(ValueError):
    """A model or text file is malformed.  The message names the file and, where
    there is one, the line (ARPA, text) or byte offset / section (binary)."""

    def __init__(self, message, path=None, line=None):
        self.path = path
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f":{line}"
            where += ": "
        super().__init__(where + message)


class MappedFileChanged(FormatError):
    """A page of a memory-mapped model file was read after the file was truncated.
    The model no longer has its data: reload it (or load with LoadMethod.READ)."""


class ModelLoadError(OSError, FormatError):
    """``nplm.Model(path)`` could not load ``path``.  An OSError like kenlm's
    ("Cannot read model '<path>' (<reason>)"), and a FormatError when the file
    itself is malformed, so either ``except`` works."""

    def __init__(self, path, reason):
        OSError.__init__(self, f"Cannot read model '{path}' ({reason})")
        self.path = path
        self.line = getattr(reason, "line", None)


class CompressedDataError(FormatError, EOFError):
    """A compressed file (gzip/bz2/xz) is corrupt or truncated.  Raised by the
    readers of ``textio.open_binary`` instead of the decompressors' bare
    EOFError / zlib.error / LZMAError, naming the file; still an EOFError so
    handlers written for the decompressors' truncation error keep working."""


# Whether error messages may quote the file being read.  A spec may name any path
# (/etc/shadow: "first non-empty line was 'root:$6$...'"), so while a file that the
# user did not name directly loads, messages give the size of a bad line, not its text.
_QUOTE_CONTENT = contextvars.ContextVar("nplm_quote_content", default=True)


def quoted(raw, limit=60):
    """``raw`` (bytes of the file being read) as readable text for an error message,
    or only its length inside ``content_hidden()``."""
    if not _QUOTE_CONTENT.get():
        return f"<{len(raw)} bytes, not shown: the file was named by a spec, not by you>"
    text = raw.decode("utf-8", "backslashreplace")
    text = "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)
    return "'" + (text if len(text) <= limit else text[:limit] + "...") + "'"


class content_hidden:  # noqa: N801 (used as a function: ``with content_hidden():``)
    """Inside the block, error messages do not quote what the files read contain.
    (A class rather than contextlib.contextmanager: contextlib's imports would be most
    of the query program's start-up cost of this module.)"""

    def __enter__(self):
        self._token = _QUOTE_CONTENT.set(False)

    def __exit__(self, *exc):
        _QUOTE_CONTENT.reset(self._token)
