"""Type stubs of the extension module nplm.compose._interp (written by tools/make_stubs.py)."""
from typing import Any

import numpy as np

from nplm._kernels import LMCore

BINS_MAX: int

class InterpolatedCore(LMCore):
    def __init__(self, cores: list, maps: Any, weights: Any, mode: int, unk_penalty: Any, bos_id: int, eos_id: int, cache_entries: int = ..., needs_gil: bool = ..., providers: Any = ..., sizes: Any = ...) -> Any: ...
    bins: Any
    bucket_by: Any
    def clear_cache(self) -> Any: ...
    def component_contexts(self, contexts: np.ndarray, i: int) -> Any: ...
    components: Any
    def context_rows(self, contexts: np.ndarray) -> Any: ...
    def distributions(self, contexts: np.ndarray, out: np.ndarray, threads: int = ...) -> Any: ...
    mode: Any
    n: Any
    n_buckets: Any
    needs_gil: Any
    def set_weights(self, weights: Any, bucket_by: int = ..., edges: Any = ...) -> Any: ...
    size: Any
    def state_features(self, contexts: np.ndarray) -> Any: ...
    def trace(self, tokens: np.ndarray, offsets: np.ndarray, bos: bool) -> Any: ...
    z_hits: Any
    z_misses: Any


class KenlmCore(LMCore):
    def __init__(self, *args: Any, **kwargs: Any) -> Any: ...

LINEAR: int
LOGLINEAR: int
NORMALISED: int
def loglinear_objective(F: np.ndarray, counts: np.ndarray, weights: np.ndarray, skip: int, threads: int = ...) -> Any: ...
