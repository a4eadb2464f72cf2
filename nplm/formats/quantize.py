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

from ..errors import FormatError
from . import container

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


def dequantize_arrays(cont, lazy=False):
    """{parameter name: float32 array} of a loaded neural container, quantised or not.
    With ``lazy``, a DequantizedParams mapping that converts each array when it is
    first asked for (every array is checked now)."""
    from ..neural import PARAM_NAMES
    q = cont.config.get("quantized")
    if q and not isinstance(q, dict):  # (reliability fix: a non-object raised AttributeError)
        raise FormatError(f"malformed quantisation description {q!r}", cont.path)
    names = set(q.get("params", [])) if q else set()
    if q and q.get("dtype") not in DTYPES:
        raise FormatError(f"unknown quantisation {q.get('dtype')!r}", cont.path)
    stored, scales = {}, {}
    for name in PARAM_NAMES:
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
    return params if lazy else {name: params[name] for name in PARAM_NAMES}


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


def load_neural(path, return_container=False, lazy=False):
    """A NeuralNet from an nplm neural file, float32 or quantised (NeuralNet.load
    reads both; ``lazy``: see dequantize_arrays)."""
    from ..neural import NeuralNet
    return NeuralNet.load(path, return_container=return_container, lazy=lazy)


def quantize_file(src, dst, dtype, messages=None):
    """Write a quantised copy of the neural model ``src`` (float32 or quantised) to
    ``dst`` (atomically).  ``dtype`` "float32" writes a plain float32 model.

    Fallback normaliser tables (``nplm precompute``) hold softmax normalisers of the
    source's weights; they are kept only where the output's weights are the same
    values (float16/int8 -> float32, float16 -> float16) and otherwise left out, with a
    warning through ``messages(text)`` (default: a Python warning): a stale table would
    make fallback scores silently unnormalised."""
    net, c = load_neural(src, return_container=True)
    extra_config = {k: v for k, v in c.config.items() if k not in ("format", "net", "specials", "quantized")}
    extra_arrays = {k: v for k, v in c.arrays.items()
                    if not k.startswith(("param.", "qscale.", "vocab.", "struct."))}
    if dtype == "float32":
        net.save(dst, extra_config=extra_config, extra_arrays=extra_arrays)
        return net
    arrays, names = quantize_params(net.params, dtype)
    if any(k.startswith("fallback.") for k in extra_arrays) and not _same_weights(net.params, arrays, names):
        extra_arrays = {k: v for k, v in extra_arrays.items() if not k.startswith("fallback.")}
        extra_config.pop("fallback", None)
        note = (f"warning: the fallback normaliser tables (nplm precompute) were computed for {src}'s weights "
                f"and do not match the {dtype} ones, so they are left out of {dst}; for "
                f"normalization='fallback' run `nplm precompute {dst} --text TRAIN` again")
        if messages is not None:
            messages(note)
        else:
            import warnings
            warnings.warn(note, stacklevel=2)
    from ..neural import FORMAT, KIND
    from ..vocab import SPECIALS
    config = {"format": FORMAT, "net": net.config.to_json(), "specials": list(SPECIALS),
              "quantized": {"dtype": dtype, "params": names}}
    config.update(extra_config)
    arrays.update(net.vocab.to_arrays())
    for n, v in net.structs.items():
        arrays["struct." + n] = v
    arrays.update(extra_arrays)
    container.write(dst, KIND, config, arrays)
    return net


def _same_weights(params, arrays, names):
    """Whether the quantised ``arrays`` give back exactly the float32 ``params``."""
    scales = {n: arrays["qscale." + n] for n in names if "qscale." + n in arrays}
    back = DequantizedParams({n: arrays["param." + n] for n in params}, set(names), scales)
    return all(np.array_equal(np.asarray(params[n], np.float32), back[n]) for n in names)


def perplexity_change(reference, quantised, text):
    """(perplexity of ``reference``, of ``quantised``) NeuralNets on a text file, both
    computed exactly (normalised), each over its own vocabulary's ids (a converted
    ISI model may number the words differently)."""
    from ..vocab import examples, read_sentences
    sents = read_sentences(text)
    return tuple(net.perplexity(*examples(sents, net.vocab, net.order)) for net in (reference, quantised))
