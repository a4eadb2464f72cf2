"""Type stubs of the extension module nplm.compose._rescore (written by tools/make_stubs.py)."""
from typing import Any

import numpy as np

FORMAT_CODES: dict

class SharedScorer:
    def __init__(self, *args: Any, **kwargs: Any) -> Any: ...
    lookups: Any
    def score(self, buf: np.ndarray, hyp_a: np.ndarray, hyp_b: np.ndarray, groups: np.ndarray, threads: int = ...) -> Any: ...

def assemble(buf: np.ndarray, starts: np.ndarray, ins: np.ndarray, labels: list, values: np.ndarray) -> Any: ...
def scan(chunk: bytes, fmt: int, fields: int, last_id: bytes) -> Any: ...
