"""Quantised neural models: float16 or int8 copies of a network's weight matrices.

A quantised file is an ordinary ``neural`` container whose config carries
``"quantized": {"dtype": "float16" | "int8", "params": [names]}``.  For each listed
parameter the array ``param.<name>`` holds float16 values, or int8 values with a
float32 scale per row in ``qscale.<name>`` (symmetric: w = q * scale, scale =
max |row| / 127, so every row uses the full int8 range).  Biases and the small
structures stay float32: they are a negligible part of the size.

Loading checks every array; the float32 values are made when first asked for
(``DequantizedParams``).  A float16 ReLU net's query core on AVX2 or AVX-512 reads the
embedding and output matrices as stored, memory-mapped from the file, and never
asks (``nplm/_nquery.pyx``: the float16 row kernels give the float32 kernels' bits).
Other nets and int8 models are converted at load, so their saving is on disk; at
query time they are resident in full, where a float32 file is memory-mapped and only
the pages queries touch count.  ``NeuralNet.load`` reads plain and quantised files
alike through ``dequantize_arrays(container)``; ``load_neural`` is kept as a name
for it.
"""
from collections.abc import Mapping

import numpy as np

from nplm.errors import FormatError

DTYPES = ("float16", "int8")
# Matrices that are quantised; vectors (biases) are not.
MATRICES = ("emb", "ctx", "w1", "w2", "out_w", "cls_w")


def quantize_params(params, dtype):
    """({array name: array}, [quantised names]) for float32 ``params``."""
    if dtype not in DTYPES:
        raise ValueError(f"quantisation dtype must be one of {DTYPES}, not {dtype!r}")
    arrays, names = {}, []
    for name, a in params.items():
        a = np.asarray(a, dtype=np.float32)
        if name not in MATRICES or a.ndim != 2 or a.size == 0:
            arrays["param." + name] = a
            continue
        names.append(name)
        if dtype == "float16":
            if np.abs(a).max() > np.finfo(np.float16).max:
                raise ValueError(f"parameter {name!r} has values beyond float16's range")
            arrays["param." + name] = a.astype(np.float16)
        else:
            scale = np.abs(a).max(axis=1) / 127.0
            safe = np.where(scale > 0, scale, 1.0)
            q = np.clip(np.rint(a / safe[:, None]), -127, 127).astype(np.int8)
            arrays["param." + name] = q
            arrays["qscale." + name] = scale.astype(np.float32)
    return arrays, names


def dequantize_arrays(cont, param_names, lazy=False):
    """{parameter name: float32 array} of ``param_names`` in a loaded neural container,
    quantised or not.
    With ``lazy``, a DequantizedParams mapping that converts each array when it is
    first asked for (every array is checked now)."""
    q = cont.config.get("quantized")
    if q and not isinstance(q, dict):  # (reliability fix: a non-object raised AttributeError)
        raise FormatError(f"malformed quantisation description {q!r}", cont.path)
    names = set(q.get("params", [])) if q else set()
    if q and q.get("dtype") not in DTYPES:
        raise FormatError(f"unknown quantisation {q.get('dtype')!r}", cont.path)
    stored, scales = {}, {}
    for name in param_names:
        key = "param." + name
        if key not in cont.arrays:
            raise FormatError(f"parameter {name!r} is missing", cont.path)
        a = stored[name] = cont.arrays[key]
        if name not in names:
            continue
        if q["dtype"] == "float16":
            if a.dtype != np.float16:
                raise FormatError(f"parameter {name!r} should be float16, is {a.dtype}", cont.path)
        else:
            scale = scales[name] = cont.arrays.get("qscale." + name)
            if a.dtype != np.int8 or scale is None or scale.shape != (a.shape[0],) or scale.dtype != np.float32:
                raise FormatError(f"parameter {name!r}: int8 values or their row scales are malformed", cont.path)
    params = DequantizedParams(stored, names, scales)
    return params if lazy else {name: params[name] for name in param_names}


class DequantizedParams(Mapping):
    """A quantised network's parameters as float32 arrays, each converted when first
    asked for and kept.  A query core that reads float16 weights itself takes them
    from ``stored`` and never converts them, so they stay memory-mapped."""

    def __init__(self, stored, quantised, scales):
        self._stored, self._quantised, self._scales = stored, quantised, scales
        self._float32 = {}

    def __getitem__(self, name):
        if name not in self._float32:
            a = self._stored[name]
            if name in self._quantised:
                a = a.astype(np.float32)
                if name in self._scales:
                    a *= self._scales[name][:, None]
            self._float32[name] = a
        return self._float32[name]

    def __contains__(self, name):
        return name in self._stored       # (Mapping's would convert the array)

    def __iter__(self):
        return iter(self._stored)

    def __len__(self):
        return len(self._stored)

    def stored(self, name):
        """The array as the file holds it: float16 stays float16 (int8 is converted)."""
        a = self._stored[name]
        return a if a.dtype != np.int8 else self[name]

    def spec(self, name):
        """(shape, dtype) the array has once converted, without converting it (an
        array stored unquantised keeps its own dtype, for the loader's checks)."""
        a = self._stored[name]
        return tuple(a.shape), np.dtype(np.float32) if name in self._quantised else a.dtype

    def converted(self):
        """Names of the quantised arrays converted so far."""
        return set(self._float32) & self._quantised


def same_weights(params, arrays, names):
    """Whether the quantised ``arrays`` give back exactly the float32 ``params``."""
    scales = {n: arrays["qscale." + n] for n in names if "qscale." + n in arrays}
    back = DequantizedParams({n: arrays["param." + n] for n in params}, set(names), scales)
    return all(np.array_equal(np.asarray(params[n], np.float32), back[n]) for n in names)
