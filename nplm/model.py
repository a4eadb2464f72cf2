"""``nplm.Model``: the kenlm.Model-compatible entry point for every model kind.

The file's content decides what it is: an nplm binary (its header names the kind)
or an ARPA file (plain or compressed).  Scoring itself lives in
``_kernels.ModelBase`` and is the same code for every kind.
"""
import difflib
import errno
import importlib
import operator
import os
import sys
from typing import Iterable, Optional, Union

import numpy as np

from nplm import _kernels
from nplm.errors import FormatError, ModelLoadError
from nplm.io._mapguard import collecting
from nplm.io.files import sniff
from nplm.io.resources import binary_fits, check_arpa, check_binary_populate

# A worker process that queries one model imports only that model's reader: the ARPA
# parser, nplm's binary layouts and the neural kernels (scipy's BLAS) are imported by
# the load that needs them.
_lazy = importlib.import_module


class LoadMethod:
    """kenlm.LoadMethod, with kenlm's meanings for nplm binaries.  READ and
    PARALLEL_READ copy the file into private memory: the model no longer depends on
    the file, which may then be truncated or rewritten in place.  The others map it
    (POPULATE_* prefault its pages with MAP_POPULATE, LAZY reads them on first
    use), so the model reads the file while it is used: replace a mapped model's
    file by writing a new file and renaming it over the old one (nplm's writers
    all do; the loaded model keeps the old file), never by truncating or rewriting
    it in place: the pages it changes change the model's scores, and reading a page
    that truncation cut off raises nplm.errors.MappedFileChanged (a FormatError) in
    the thread that scores, whichever thread loaded the model, on that call and every
    later one -- the model must then be loaded again -- where it would otherwise kill
    the process with SIGBUS.  ARPA files are always read
    into memory.  KenLM binaries are loaded as kenlm loads them: LAZY maps, POPULATE_*
    map and prefault, READ and PARALLEL_READ read the file into memory."""
    LAZY = 0
    POPULATE_OR_LAZY = 1
    POPULATE_OR_READ = 2
    READ = 3
    PARALLEL_READ = 4


class ARPALoadComplain:
    """kenlm.ARPALoadComplain: whether loading an ARPA prints the advice to build a binary."""
    ALL = 0
    EXPENSIVE = 1
    NONE = 2


class Config:
    """kenlm.Config: load options.  ``show_progress`` shows a progress bar while an
    ARPA loads; ``arpa_complain`` prints the advice to convert it to a binary.

    As kenlm's, it has only these attributes (another name, e.g. a misspelt
    ``load_mehtod``, raises AttributeError), ``show_progress`` takes any value's truth
    and the other two raise TypeError for a non-integer.  Stricter than kenlm (which
    truncates 1.5 to 1 and stores 7, then loads as it may): a fractional number is a
    TypeError and an integer that is not one of LoadMethod's / ARPALoadComplain's
    values a ValueError."""
    __slots__ = ("_load_method", "_show_progress", "_arpa_complain")

    def __init__(self):
        self.load_method = LoadMethod.POPULATE_OR_READ
        self.show_progress = True
        self.arpa_complain = ARPALoadComplain.ALL

    def __setattr__(self, name, value):
        if name not in ("load_method", "show_progress", "arpa_complain") and name not in Config.__slots__:
            close = difflib.get_close_matches(name, ["load_method", "show_progress", "arpa_complain"], 1)
            raise AttributeError(f"'nplm.Config' object has no attribute {name!r}"
                                 + (f" (did you mean {close[0]!r}?)" if close else ""))
        object.__setattr__(self, name, value)

    @staticmethod
    def _choice(name, value, constants):
        if isinstance(value, float) and value.is_integer():
            value = int(value)          # kenlm takes 1.0 as 1
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"an integer is required for Config.{name}, not {value!r}") from None
        valid = sorted(v for k, v in vars(constants).items() if k.isupper())
        if value not in valid:
            names = ", ".join(f"{constants.__name__}.{k}={v}" for k, v in sorted(
                ((k, v) for k, v in vars(constants).items() if k.isupper()), key=lambda kv: kv[1]))
            raise ValueError(f"Config.{name} must be one of {names}, not {value!r}")
        return int(value)

    @property
    def load_method(self):
        return self._load_method

    @load_method.setter
    def load_method(self, value):
        self._load_method = self._choice("load_method", value, LoadMethod)

    @property
    def show_progress(self):
        return self._show_progress

    @show_progress.setter
    def show_progress(self, value):
        self._show_progress = bool(value)   # kenlm: a C++ bool, any value's truth

    @property
    def arpa_complain(self):
        return self._arpa_complain

    @arpa_complain.setter
    def arpa_complain(self, value):
        self._arpa_complain = self._choice("arpa_complain", value, ARPALoadComplain)

    def __delattr__(self, name):
        raise NotImplementedError("__del__")    # as kenlm's

    def __repr__(self):
        return (f"Config(load_method={self.load_method}, show_progress={self.show_progress}, "
                f"arpa_complain={self.arpa_complain})")


def quiet_config(load_method=LoadMethod.POPULATE_OR_READ):
    """A Config that loads silently: no progress bar, no advice to build a binary
    (for models a command loads for itself, which kenlm's defaults would announce)."""
    config = Config()
    config.load_method = load_method
    config.show_progress = False
    config.arpa_complain = ARPALoadComplain.NONE
    return config


def _as_path_bytes(path):
    if isinstance(path, bytes):
        return path
    if isinstance(path, str):
        return path.encode("utf-8")
    if isinstance(path, os.PathLike):
        return os.fsencode(path)
    raise TypeError(f"Cannot convert {type(path)} to string")


_CONFIG_FIELDS = ("load_method", "show_progress", "arpa_complain")


def _as_config(config):
    """``config`` as an nplm.Config: None is the default, a kenlm.Config (a script
    that mixes the two modules) is copied field by field, anything else is a
    TypeError as in kenlm (not an AttributeError from deep inside the load)."""
    if config is None:
        return Config()
    if isinstance(config, Config):
        return config
    if type(config).__name__ == "Config" and all(hasattr(config, f) for f in _CONFIG_FIELDS):
        copy = Config()
        for f in _CONFIG_FIELDS:
            setattr(copy, f, getattr(config, f))
        return copy
    raise TypeError(f"Argument 'config' has incorrect type (expected nplm.Config, got "
                    f"{type(config).__name__})")


# Model kinds whose modules sit above this one (interpolation specs, in
# nplm.compose.interpolate) register load(path, config, stream) -> data for the kind
# nplm.io.files.sniff names, when imported, so that Model(path) opens them without
# this module importing them.
_FILE_KINDS = {}


def register_file_kind(kind, load):
    """Let Model(path) open the files that sniff says are ``kind``, with ``load``."""
    _FILE_KINDS[kind] = load


def _load_spec(path, config, stream):
    # interpolation specs load with nplm.compose.interpolate, imported at the first one
    return importlib.import_module("nplm.compose.interpolate").load_spec(path, config, stream)


register_file_kind("spec", _load_spec)


def _load(path, config, normalization=None, cache_size=None):
    """The BackoffData (or other model data) of a file, opened once (a pipe or
    /dev/stdin can be read only once)."""
    kind, stream = sniff(path)
    with stream:
        if kind == "nplm":
            if not stream.seekable():
                raise FormatError("an nplm binary is mapped from its file: give the file, not a pipe", path)
            return _load_binary(path, config, normalization, cache_size)
        if kind in _FILE_KINDS:
            return _FILE_KINDS[kind](path, config, stream)
        if kind == "kenlm":
            if not stream.seekable():
                raise FormatError("a KenLM binary is mapped from its file: give the file, not a pipe", path)
            return _load_kenlm(path, config.load_method)
        if stream.seekable():
            check_arpa(path)  # header counts beyond the available memory: refuse, do not swap
        if config.arpa_complain == ARPALoadComplain.ALL:
            print("Loading the LM will be faster if you build a binary file.", file=sys.stderr)
        tables = _lazy("nplm.backoff.arpa").read_arpa(path, progress=config.show_progress, stream=stream)
    return _lazy("nplm.backoff.binary").from_tables(tables)


def _load_binary(path, config, normalization, cache_size):
    head = _lazy("nplm.io.container").read(path)
    kind = head.kind
    # READ copies the file into private memory (kenlm's READ): a loaded model that no
    # longer depends on its file.  The others map it (LoadMethod's docstring).
    copy = config.load_method in (LoadMethod.READ, LoadMethod.PARALLEL_READ)
    if kind == "neural":
        return _lazy("nplm.neural.query").load(path, normalization, 4096 if cache_size is None else cache_size, copy)
    if kind == "backoff":
        populate = config.load_method in (LoadMethod.POPULATE_OR_LAZY, LoadMethod.POPULATE_OR_READ,
                                          LoadMethod.READ, LoadMethod.PARALLEL_READ)
        if config.load_method == LoadMethod.POPULATE_OR_LAZY:
            # "or lazy": a file that does not fit in memory is mapped lazily
            # instead of being refused (the other populate methods refuse).
            populate = binary_fits(path)
        return _lazy("nplm.backoff.binary").load_binary(path, populate=populate, copy=copy)
    raise FormatError(f"nplm binary of kind {kind!r} cannot be queried by this version", path)


def _load_kenlm(path, load_method):
    """A KenLM binary, loaded as kenlm's ``load_method`` loads it: LAZY maps it,
    POPULATE_* map it and read it in (POPULATE_OR_LAZY maps lazily a file that does not
    fit in memory, where the others refuse it), READ / PARALLEL_READ copy it."""
    if load_method == LoadMethod.POPULATE_OR_LAZY and not binary_fits(path):
        load_method = LoadMethod.LAZY
    elif load_method != LoadMethod.LAZY:
        check_binary_populate(path)
    return _lazy("nplm.backoff.kenlm.reader").load(path, load_method)


class Model(_kernels.ModelBase):
    """A language model with kenlm.Model's API.  ``path`` may be an ARPA file (plain
    or .gz/.bz2/.xz), an nplm binary of any model kind, or a KenLM binary (any file
    KenLM's build_binary writes: probing, trie, quantised, array-compressed, with or
    without its vocabulary strings, rest costs), recognised by its content and
    scored exactly as kenlm scores it.  All scores are log10.
    Neural models also take ``normalization`` and ``cache_size``: how many contexts
    the single-query cache (context -> hidden state and normalisers) holds, 4096 by
    default; a decoder with more live contexts than that gains from more."""

    def __init__(self, path: Union[str, bytes, os.PathLike], config: Optional["Config"] = None,
                 normalization: Optional[str] = None, cache_size: Optional[int] = None) -> None:
        if getattr(self, "_data", None) is not None:
            # another thread may be scoring with the tables a reload would free
            raise RuntimeError("this nplm.Model is already loaded: load another file into a new Model")
        config = _as_config(config)
        raw = _as_path_bytes(path)
        self.path = os.path.abspath(raw)
        self.config = config
        name = os.fsdecode(raw)
        if cache_size is not None and (isinstance(cache_size, bool) or not isinstance(cache_size, int)
                                       or not 1 <= cache_size <= 2**30):
            raise ValueError(f"cache_size must be an integer from 1 to 2**30, not {cache_size!r}")
        try:
            with collecting() as mapped:
                data = _load(name, config, normalization, cache_size)
        except MemoryError as e:
            raise ModelLoadError(name, OSError(errno.ENOMEM, f"not enough memory to load it: {e}")) from e
        except (OSError, ValueError, LookupError, ArithmeticError, RecursionError) as e:
            # (a reader's KeyError / IndexError / OverflowError / RecursionError is a
            # file it could not load too: named, not a traceback)
            raise ModelLoadError(name, e) from e
        for option, value in (("normalization", normalization), ("cache_size", cache_size)):
            if value is not None and getattr(data, "normalization", None) is None:
                raise ModelLoadError(name, ValueError(f"{option} applies to neural models only"))
        self.cache_size = cache_size
        self._data = data
        self.normalization = getattr(data, "normalization", None)
        self._attach(data.core, data.vocab, mapped)

    def __repr__(self):
        if self.normalization is None:
            return "<Model from {0}>".format(os.path.basename(self.path))
        return "<Model from {0} normalization={1!r}>".format(os.path.basename(self.path), self.normalization)

    def __reduce__(self):
        if self.normalization is None:
            return (Model, (self.path,))
        return (_reload, (self.path, self.normalization, self.cache_size))

    # Neural models score batches in blocks of contexts that the kernels' OpenMP
    # threads split: ``threads`` sets that team (default OMP_NUM_THREADS), not
    # sentences per thread.  Dense layers' BLAS products keep OpenBLAS's own count.

    def score_sentences(self, sentences: Iterable[str], bos: bool = True, eos: bool = True,
                        threads: Optional[int] = None) -> np.ndarray:
        if self.normalization is None:
            return super().score_sentences(sentences, bos, eos, threads)
        omp_threads = _lazy("nplm.neural._query").omp_threads
        if threads is None:
            probs, _, _, offsets = self.full_scores_batch(sentences, bos, eos)
        else:
            old = omp_threads(_kernels.thread_count(threads))
            try:
                probs, _, _, offsets = self.full_scores_batch(sentences, bos, eos)
            finally:
                omp_threads(old)
        # Totals as score() makes them: each sentence's float32 log10 probabilities
        # added in order in a float32 total (kenlm's accumulation), not in float64,
        # which drifted from score() by 0.7 on a 9000-word sentence.
        return _kernels.segment_sums(probs, offsets)

    def full_scores_batch(self, sentences: Iterable[str], bos: bool = True, eos: bool = True) -> list:
        if self.normalization is None:
            return super().full_scores_batch(sentences, bos, eos)
        neural = _lazy("nplm.neural.query")
        contexts, words, ctx_len, oov, offsets = neural.sentence_items(self.vocab, self.order - 1,
                                                                _kernels.sentence_list(sentences), bos, eos)
        lp, lengths = neural.batch_log10(self, contexts, words, ctx_len)
        self.check_mapped()
        return lp.astype(np.float32), lengths.astype(np.int32), oov, offsets


def _reload(path, normalization, cache_size=None):
    return Model(path, normalization=normalization, cache_size=cache_size)


class LanguageModel(Model):
    """Backwards-compatible alias of Model (as in kenlm)."""
