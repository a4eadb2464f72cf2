"""The options of Kneser-Ney estimation, validated once, and lmplz's memory sizes.

``EstimateConfig`` holds what every stage needs; ``EstimateConfig.make`` checks the
user's values (the order nplm can load, lmplz's pruning and fallback rules, the
memory budget) and raises ValueError/TypeError naming the bad one.
"""
import dataclasses
import operator
import os
import re
import tempfile

import numpy as np

from nplm._kernels import QUERY_MAX_ORDER

# The Kneser-Ney kernel counts up to order 32, but a model is only useful if nplm
# can load it: the query kernels' limit.
MAX_ORDER = QUERY_MAX_ORDER
DEFAULT_FALLBACK = (0.5, 1.0, 1.5)
# Without -S, like lmplz: 80% of the machine's physical memory.
DEFAULT_MEMORY = "80%"

_SUFFIXES = {"": 1 << 10, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
             "p": 1 << 50, "e": 1 << 60}


@dataclasses.dataclass
class EstimateConfig:
    order: int
    thresholds: np.ndarray          # (order,) uint64: order k prunes raw counts <= t[k-1]
    fallback: object = None         # None or (4,) float32 discounts D0=0, D1, D2, D3+
    interpolate_unigrams: bool = True
    limit_vocab_file: object = None
    skip_symbols: bool = False
    verbose_header: bool = False
    vocab_pad: int = 0
    refuse_unk: bool = False        # <unk> in the text fails, as in KenLM's lmplz
    memory: int = 0                 # the budget in bytes (-S)
    temp_dir: str = ""              # where runs spill (-T)
    progress: bool = True
    collapse_values: bool = False   # log10 q for probabilities, back-offs 0 (lmplz --collapse_values)

    @property
    def pruning(self):
        return bool(self.thresholds.any()) or self.limit_vocab_file is not None

    @classmethod
    def make(cls, order, *, discount_fallback=None, prune=None, interpolate_unigrams=True,
             limit_vocab_file=None, skip_symbols=False, verbose_header=False, vocab_pad=0,
             memory=None, temp_prefix=None, progress=True, refuse_unk=False, collapse_values=False):
        order = check_order(order)
        vocab_pad = operator.index(vocab_pad)
        if vocab_pad < 0:
            raise ValueError("vocab_pad must be >= 0")
        if vocab_pad and not interpolate_unigrams:
            raise ValueError("vocab_pad requires interpolate_unigrams")
        if limit_vocab_file is not None and not os.path.exists(limit_vocab_file):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(limit_vocab_file))
        return cls(order=order, thresholds=prune_thresholds(prune, order),
                   fallback=fallback_discounts(discount_fallback),
                   interpolate_unigrams=bool(interpolate_unigrams), limit_vocab_file=limit_vocab_file,
                   skip_symbols=bool(skip_symbols), verbose_header=bool(verbose_header),
                   vocab_pad=vocab_pad, refuse_unk=bool(refuse_unk),
                   memory=parse_size(memory if memory is not None else DEFAULT_MEMORY),
                   temp_dir=temp_directory(temp_prefix), progress=progress,
                   collapse_values=bool(collapse_values))


def check_order(order):
    try:
        order = operator.index(order)
    except TypeError:
        raise TypeError(f"order must be an integer, got {order!r}") from None
    if not 1 <= order <= MAX_ORDER:
        raise ValueError(f"order must be between 1 and {MAX_ORDER} (the highest order nplm "
                         f"can load), got {order}")
    return order


def prune_thresholds(prune, order):
    """lmplz's --prune: non-decreasing per-order thresholds, the last one repeated."""
    if prune is None or len(prune) == 0:
        return np.zeros(order, dtype=np.uint64)
    values = []
    for t in prune:
        try:
            t = operator.index(t) if not isinstance(t, str) else int(t)
        except (TypeError, ValueError):
            raise ValueError(f"bad pruning threshold {t!r}") from None
        if t < 0:
            raise ValueError(f"bad pruning threshold {t} (must be >= 0)")
        values.append(t)
    if len(values) > order:
        raise ValueError(f"pruning thresholds given for orders 1 through {len(values)} "
                         f"but the model only has order {order}")
    if any(a > b for a, b in zip(values, values[1:])):
        raise ValueError("pruning thresholds must be non-decreasing; otherwise substrings "
                         "would be removed, which is bad for query-time data structures")
    if values[0] != 0:
        raise ValueError("unigrams cannot be pruned by count (the first threshold must be 0); "
                         "use limit_vocab_file / --limit_vocab_file to restrict the vocabulary")
    values += [values[-1]] * (order - len(values))
    return np.array(values, dtype=np.uint64)


def fallback_discounts(discount_fallback):
    """None (off), True (lmplz's defaults 0.5 1 1.5) or up to three discounts."""
    if discount_fallback is None or discount_fallback is False:
        return None
    if discount_fallback is True:
        values = list(DEFAULT_FALLBACK)
    else:
        values = list(discount_fallback)
    if not values:
        values = list(DEFAULT_FALLBACK)
    if len(values) > 3:
        raise ValueError("specify at most three fallback discounts: 1, 2, and 3+")
    out = [0.0]
    for i in range(3):
        raw = values[min(i, len(values) - 1)]
        try:
            d = np.float32(float(raw))
        except (TypeError, ValueError):
            raise ValueError(f"bad fallback discount {raw!r}") from None
        if not 0.0 <= d <= i + 1:
            raise ValueError(f"the discount for count {i + 1} was parsed as {float(d):g} "
                             f"which is not in the range [0, {i + 1}]")
        out.append(d)
    return np.array(out, dtype=np.float32)


def physical_memory():
    """Bytes of physical memory (None where unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def parse_size(size):
    """lmplz's -S: bytes as an int, or a string: a number with an optional suffix
    b, K, M, G, T, P, E (powers of 1024; no suffix means K, as in lmplz) or %
    of physical memory."""
    if isinstance(size, int) and not isinstance(size, bool):
        if size <= 0:
            raise ValueError(f"memory size must be positive, got {size}")
        return size
    text = str(size).strip()
    m = re.fullmatch(r"(\d+(?:\.\d*)?|\.\d+)\s*([bBkKmMgGtTpPeE%]?)", text)
    if m is None:
        raise ValueError(f"bad memory size {size!r}: expected a number with a suffix "
                         "b, K, M, G, T or %, as in 1G or 80%")
    value, suffix = float(m.group(1)), m.group(2).lower()
    if suffix == "%":
        total = physical_memory()
        if total is None:
            raise ValueError(f"memory size {size!r}: the physical memory is unknown here; "
                             "give a size such as 4G")
        out = int(total * value / 100.0)
    else:
        out = int(value * _SUFFIXES[suffix])
    if out <= 0:
        raise ValueError(f"memory size must be positive, got {size!r}")
    return out


def temp_directory(prefix):
    """lmplz's -T: the folder for temporary files (default: TMPDIR or /tmp).  lmplz
    takes a file-name prefix; a prefix that is no folder uses its folder."""
    if prefix is None or prefix == "":
        return tempfile.gettempdir()
    prefix = os.fspath(prefix)
    if os.path.isdir(prefix):
        return prefix
    folder = os.path.dirname(prefix) or "."
    if not os.path.isdir(folder):
        raise FileNotFoundError(2, "No such directory for temporary files (-T)", prefix)
    return folder
