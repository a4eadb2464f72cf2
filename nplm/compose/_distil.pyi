"""Type stubs of the extension module nplm.compose._distil (written by tools/make_stubs.py)."""
from typing import Any

import numpy as np

def probe_groups(core: Any, ctx: np.ndarray, ctx_off: np.ndarray, words: np.ndarray, word_off: np.ndarray, out_ctx: np.ndarray, out_word: np.ndarray, out_prob: np.ndarray, out_bo: np.ndarray) -> Any: ...
def score_rows(core: Any, grams: np.ndarray, out: np.ndarray, threads: int = ...) -> Any: ...
