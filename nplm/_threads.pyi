"""Type stubs of the extension module nplm._threads (written by tools/make_stubs.py)."""
from typing import Any


MAX_THREADS: int
def cpu_count() -> Any: ...
def thread_count(threads: Any) -> Any: ...
