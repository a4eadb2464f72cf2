"""Type stubs of the extension module nplm.backoff.kenlm._query_text (written by tools/make_stubs.py)."""
from typing import Any

MAX_ORDER: int

class TextQuery:
    def __init__(self, *args: Any, **kwargs: Any) -> Any: ...
    def run(self, in_fd: int, out_fd: int, words: bool, lines: bool, context: bool, flush: bool, threads: int = ...) -> Any: ...
