"""Exception types.  Every reader raises one of these, naming the file and line."""


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
