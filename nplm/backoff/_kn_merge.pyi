"""Type stubs of the extension module nplm.backoff._kn_merge (written by tools/make_stubs.py)."""
from typing import Any

import numpy as np

def locate(sub: np.ndarray, sup: np.ndarray) -> Any: ...
def merge_runs(keys_list: list, counts_list: list, order: int) -> Any: ...
