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
