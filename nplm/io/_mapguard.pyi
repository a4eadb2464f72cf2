"""Type stubs of the extension module nplm.io._mapguard (written by tools/make_stubs.py)."""
from typing import Any

from nplm.errors import FormatError


class MappedFileChanged(FormatError):
    ...

def guard(mm: Any, path: Any) -> Any: ...
def install() -> Any: ...
