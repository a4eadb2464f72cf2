"""Type stubs of the extension module nplm.neural._clusters (written by tools/make_stubs.py)."""
from typing import Any

import numpy as np

def exchange_pass(succ_ptr: np.ndarray, succ_word: np.ndarray, succ_count: np.ndarray, pred_ptr: np.ndarray, pred_word: np.ndarray, pred_count: np.ndarray, self_count: np.ndarray, word_nl: np.ndarray, word_nr: np.ndarray, order: np.ndarray, F: np.ndarray, word_class: np.ndarray, class_size: np.ndarray, N: np.ndarray, NT: np.ndarray, NL: np.ndarray, NR: np.ndarray, tol: float) -> Any: ...
def xlogx_table(size: int) -> Any: ...
