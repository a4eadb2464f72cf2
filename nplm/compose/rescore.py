"""N-best rescoring: one language-model feature per model added to every hypothesis
of an n-best list, and optional re-ranking with given weights.

Two list formats are read (``fmt="auto"`` tells them apart by the first line):

* Moses: ``id ||| hypothesis ||| features ||| total[ ||| more fields]``.  Each
  model's feature is appended to the feature field as ``NAME= value`` (``LM0=
  -42.1``); every other byte of the line is kept as it was.
* plain: ``id<TAB>hypothesis[<TAB>score]...``, the same number of fields on every
  line.  Each model's value is appended as one more tab-separated column.

A feature is the model's ``score(hypothesis)`` (sentence start and end on, as
``Model.score``) in log10, or in natural log with ``base="e"``, written with the
shortest digits that read back as the same float32.

The list is read in chunks of complete lines into one reused buffer, so a list of
any length runs in the memory of one chunk.  Without weights no Python runs per
line: ``_rescore.scan`` checks and splits a chunk's lines, each model scores all its
hypotheses at once through ``_rescore.SharedScorer`` (its word-by-word protocol,
each (state, word) transition of a sentence's hypotheses scored once, the model's
lookups prefetched so that they overlap; sentences in parallel with ``threads``),
and ``_rescore.assemble`` writes the lines back with the features into a reused
output buffer.  Every feature is bit-identical to ``score()``, for every model
kind.
"""
import contextlib
import itertools
import math
import os
import sys

import numpy as np

from nplm import _kernels
from nplm.backoff._arpa import format_floats
from nplm.compose import _rescore
from nplm.errors import FormatError
from nplm.io.atomic import text_output
from nplm.io.files import open_binary
from nplm.io.progress import tqdm
from nplm.model import Model, quiet_config

FORMATS = ("auto", "moses", "plain")
BASES = {"10": 1.0, "e": math.log(10.0)}
MOSES_SEP = b"|||"


class RescoreResult:
    """What a rescoring run read: ``hypotheses`` (lines), ``sentences`` (runs of
    equal sentence ids: the number of sentences of a list that keeps each one's
    hypotheses together) and the list's ``format``."""

    def __init__(self, hypotheses, sentences, fmt):
        self.hypotheses, self.sentences, self.format = hypotheses, sentences, fmt

    def __repr__(self):
        return f"<RescoreResult {self.hypotheses} hypotheses of {self.sentences} sentences ({self.format})>"


# --- arguments --------------------------------------------------------------------

def load_models(models, normalization=None):
    """Each entry as a model: a path is loaded quietly with nplm.Model; an object with
    ``score_sentences`` (any nplm model) is used as it is; a model of the real kenlm
    module is scored through nplm.Model of its file (the same numbers, which nplm
    reads from ARPA and KenLM binary files bit for bit)."""
    cfg = quiet_config()
    out = []
    for m in models:
        if type(m).__module__ == "kenlm" and hasattr(m, "path") and not hasattr(m, "score_sentences"):
            m = m.path
        if isinstance(m, (str, bytes, os.PathLike)):
            m = Model(m, cfg, normalization=normalization) if normalization else Model(m, cfg)
        elif not hasattr(m, "score_sentences"):
            raise TypeError(f"expected a model or a model path, not {type(m).__name__}")
        out.append(m)
    if not out:
        raise ValueError("rescoring needs at least one model")
    return out


def feature_names(names, n):
    """The features' names: LM0, LM1, ... by default; given names lose a trailing '='."""
    if names is None:
        return [f"LM{i}" for i in range(n)]
    names = [str(x)[:-1] if str(x).endswith("=") else str(x) for x in names]
    if len(names) != n:
        raise ValueError(f"{len(names)} feature names for {n} models")
    for x in names:
        if not x or any(c.isspace() for c in x) or "|" in x or "=" in x:
            raise ValueError(f"feature name {x!r}: expected a non-empty name without white space, "
                             "'|' or '='")
    if len(set(names)) != len(names):
        raise ValueError(f"feature names repeat: {names}")
    return names


def log_scale(base):
    key = str(base).lower()
    key = {"ln": "e", "natural": "e"}.get(key, key)
    if key not in BASES:
        raise ValueError(f"base={base!r}: expected 10 or 'e' (natural log)")
    return BASES[key]


def _weight_text(spec):
    if os.path.isfile(spec):
        with open(spec, encoding="utf-8") as f:
            lines = [line.split("#", 1)[0] for line in f]
        return " ".join(line for line in lines if not line.strip().startswith("["))
    return spec


def parse_weights(spec):
    """Weights as ``dict name -> float array`` (named) or a float array (positional)."""
    if spec is None:
        return None
    if isinstance(spec, dict):
        return {str(k).rstrip("=:"): np.atleast_1d(np.asarray(v, dtype=np.float64)) for k, v in spec.items()}
    if not isinstance(spec, str):
        return np.asarray(spec, dtype=np.float64).ravel()
    tokens = _weight_text(spec).replace(",", " ").split()
    if not any(t.endswith(("=", ":")) for t in tokens):
        try:
            return np.array([float(t) for t in tokens], dtype=np.float64)
        except ValueError:
            raise ValueError(f"weights {spec!r}: expected numbers, or 'NAME= w ...' groups") from None
    named, name = {}, None
    for t in tokens:
        if t.endswith(("=", ":")):
            name = t[:-1]
            named.setdefault(name, [])
        elif name is None:
            raise ValueError(f"weights: {t!r} comes before any 'NAME='")
        else:
            try:
                named[name].append(float(t))
            except ValueError:
                raise ValueError(f"weights: {t!r} (for {name}) is not a number") from None
    return {k: np.array(v, dtype=np.float64) for k, v in named.items()}


# --- parsing ------------------------------------------------------------------------

class _Reader:
    """Chunks of parsed lines of one n-best list, with the checks that name the file
    and line of anything malformed."""

    def __init__(self, f, name, fmt):
        self.f, self.name, self.fmt = f, name, fmt
        self.line_no = 0
        self.fields = None      # the first line's field count

    def chunks(self, size):
        while True:
            raw = list(itertools.islice(self.f, size))
            if not raw:
                return
            first = self.line_no + 1
            self.line_no += len(raw)
            yield first, raw, [self.parse(line, first + i) for i, line in enumerate(raw)]

    def error(self, message, line_no):
        return FormatError(message, self.name, line_no)

    def parse(self, raw, line_no):
        """(id, hypothesis bytes, fields) of one line."""
        if not raw.strip():
            raise self.error(_SCAN_MESSAGES["empty"], line_no)
        if self.fmt == "moses":
            fields = raw.split(MOSES_SEP)
            if len(fields) < 4:
                raise self.error(f"not a Moses n-best line (found {len(fields)} '|||'-separated field"
                                 f"{'s' if len(fields) != 1 else ''}; expected 'id ||| hypothesis ||| "
                                 "features ||| total')", line_no)
            hyp = fields[1]
        else:
            fields = raw.rstrip(b"\r\n").split(b"\t")
            if len(fields) < 2:
                raise self.error("not a plain n-best line (expected 'id<TAB>hypothesis[<TAB>score]...', "
                                 "found no tab)", line_no)
            hyp = fields[1]
        if self.fields is None:
            self.fields = len(fields)
        elif len(fields) != self.fields:
            raise self.error(f"{len(fields)} fields where line 1 has {self.fields}", line_no)
        sid = fields[0].strip()
        if not sid:
            raise self.error("no sentence id (the first field is empty)", line_no)
        if len(sid.split()) != 1:
            raise self.error(f"sentence id {sid.decode('utf-8', 'replace')!r} has white space in it",
                             line_no)
        return sid, hyp, fields


def detect_format(head):
    """'moses' when the first line has '|||', else 'plain'."""
    return "moses" if MOSES_SEP in head.split(b"\n", 1)[0] else "plain"


# --- output -------------------------------------------------------------------------

def _augmented(fmt, raw, fields, added):
    """The line with the new features appended; every other byte as read."""
    if fmt == "moses":
        feats = fields[2]
        body = feats.rstrip()
        fields = list(fields)
        fields[2] = body + b" " + added + feats[len(body):]
        return MOSES_SEP.join(fields)
    stripped = raw.rstrip(b"\r\n")
    return stripped + added + raw[len(stripped):]


def _feature_text(fmt, names, columns):
    """Per line, the bytes to append: ``NAME= v`` pairs (Moses) or ``<TAB>v`` columns."""
    if fmt == "moses":
        parts = [[f"{n}= ".encode() + v.encode() for v in col] for n, col in zip(names, columns)]
        return [b" ".join(p) for p in zip(*parts)]
    parts = [[b"\t" + v.encode() for v in col] for col in columns]
    return [b"".join(p) for p in zip(*parts)]


class _Ranker:
    """The best hypothesis of each sentence id, written when the id changes."""

    def __init__(self, fmt, weights, names, out, name):
        self.fmt, self.weights, self.names, self.out, self.name = fmt, weights, names, out, name
        self.current, self.best, self.best_text = None, -math.inf, None
        self.done = set()
        self._layouts = {}

    def add(self, sid, fields, values, line_no):
        score = float(np.dot(self._weights_for(fields, line_no), self._vector(fields, values, line_no)))
        if sid != self.current:
            self.finish()
            if sid in self.done:
                raise FormatError(f"sentence id {sid.decode('utf-8', 'replace')!r} appears again after "
                                  "other ids: re-ranking needs each sentence's hypotheses together",
                                  self.name, line_no)
            self.current, self.best, self.best_text = sid, -math.inf, None
        if self.best_text is None or score > self.best:
            self.best = score
            self.best_text = fields[1].strip() if self.fmt == "moses" else fields[1]

    def finish(self):
        if self.current is not None:
            self.out.write(self.best_text + b"\n")
            self.done.add(self.current)
            self.current = None

    def _tokens(self, fields):
        return fields[2].split() if self.fmt == "moses" else fields[2:]

    def _vector(self, fields, values, line_no):
        toks = [t for t in self._tokens(fields) if not t.endswith((b"=", b":"))]
        try:
            own = [float(t) for t in toks]
        except ValueError:
            bad = next(t for t in toks if not _is_number(t))
            raise FormatError(f"feature value {bad.decode('utf-8', 'replace')!r} is not a number",
                              self.name, line_no) from None
        return np.array(own + list(values), dtype=np.float64)

    def _weights_for(self, fields, line_no):
        """The weight of every feature value of this line (cached per name layout)."""
        toks = self._tokens(fields)
        if self.fmt == "moses":
            layout, name = [], None
            for t in toks:
                if t.endswith((b"=", b":")):
                    name = t[:-1].decode("utf-8", "replace")
                    layout.append([name, 0])
                elif layout:
                    layout[-1][1] += 1
                else:
                    raise FormatError(f"feature value {t.decode('utf-8', 'replace')!r} before any "
                                      "feature name", self.name, line_no)
            key = tuple(map(tuple, layout))
        else:
            key = len(toks)
        if key not in self._layouts:
            self._layouts[key] = self._resolve(key, line_no)
        return self._layouts[key]

    def _resolve(self, key, line_no):
        n_added = len(self.names)
        if isinstance(self.weights, dict):
            if self.fmt != "moses":
                raise ValueError("named weights need a Moses list (a plain list's scores have no "
                                 "names): give one number per score column")
            groups = list(key) + [(n, 1) for n in self.names]
            out = []
            for name, count in groups:
                if name not in self.weights:
                    raise ValueError(f"no weight for feature {name!r} (line {line_no} of {self.name})")
                w = self.weights[name]
                if len(w) != count:
                    raise ValueError(f"feature {name!r} has {count} value(s) on line {line_no} of "
                                     f"{self.name} but {len(w)} weight(s)")
                out.extend(w)
            return np.array(out, dtype=np.float64)
        own = sum(c for _, c in key) if self.fmt == "moses" else key
        if len(self.weights) != own + n_added:
            raise ValueError(f"{len(self.weights)} weights for {own + n_added} feature values "
                             f"({own} in the list on line {line_no} of {self.name}, {n_added} added)")
        return self.weights


def _is_number(t):
    try:
        float(t)
        return True
    except ValueError:
        return False


# --- the run ------------------------------------------------------------------------

def _progress_bar(path, enabled):
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    size = None
    if isinstance(path, (str, os.PathLike)) and os.fspath(path) != "-" and os.path.isfile(path):
        size = os.path.getsize(path)
    return tqdm(total=size, unit="B", unit_scale=True, desc="rescore", file=sys.stderr)


def _writer(stack, out):
    if out is None:
        return None
    if hasattr(out, "write"):
        return out
    return stack.enter_context(text_output(out))


def rescore(nbest, models, out="-", *, names=None, base=10, fmt="auto", weights=None, nbest_out=None,
            normalization=None, batch=4096, threads=None, progress=None):
    """Add each model's score to every hypothesis of the n-best list ``nbest`` (a path,
    '-' for stdin, plain or compressed) and write the list to ``out`` (a path written
    atomically, '-' for stdout, or a binary file object).  ``models``: nplm models or
    model paths (ARPA, nplm binary, neural, interpolation spec); ``names`` their
    features' names (LM0, LM1, ... by default); ``base`` 10 or 'e'.  With ``weights``
    (see the module docstring) ``out`` receives the best hypothesis of each sentence
    instead, and ``nbest_out`` (optional) the list with the features added.
    ``batch``: lines a chunk (the list is read in chunks of about that many lines'
    bytes).  Returns a RescoreResult."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt={fmt!r}: expected one of {', '.join(FORMATS)}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch={batch!r}: expected a positive number of lines")
    scale = log_scale(base)
    models = load_models(models, normalization)
    names = feature_names(names, len(models))
    weights = parse_weights(weights)
    if weights is None and nbest_out is not None:
        raise ValueError("nbest_out is for re-ranking (with weights); without weights the list goes to out")
    name = "-" if nbest is None or (isinstance(nbest, str) and nbest == "-") else os.fspath(nbest)
    with contextlib.ExitStack() as stack:
        f = stack.enter_context(open_binary(name))
        head = f.peek(1 << 16) if hasattr(f, "peek") else b""
        fmt = detect_format(head) if fmt == "auto" else fmt
        if fmt == "moses" and head.strip():
            _check_clash(head.split(b"\n", 1)[0].split(MOSES_SEP)[2:3], names, name)
        bar = _progress_bar(name, progress)
        if bar is not None:
            stack.callback(bar.close)
        run = _Run(models, names, fmt, scale, threads, name, bar)
        if weights is None:
            run.listing(f, _writer(stack, out), batch)
        else:
            ranker = _Ranker(fmt, weights, names, _writer(stack, out), name)
            run.reranking(f, _writer(stack, nbest_out), ranker, batch)
            ranker.finish()
    return RescoreResult(run.lines, run.runs, fmt)


class _Run:
    """One pass over a list: its chunks scored by every model and written."""

    def __init__(self, models, names, fmt, scale, threads, name, bar):
        self.models, self.names, self.fmt, self.scale = models, names, fmt, scale
        self.threads, self.name, self.bar = threads, name, bar
        self.lines, self.runs = 0, 0
        self.scorers = [_shared_scorer(m) for m in models]

    def listing(self, f, out, batch):
        """The list with the features added, chunk by chunk through the kernels."""
        code = _rescore.FORMAT_CODES[self.fmt]
        labels = ([f" {n}= ".encode() for n in self.names] if self.fmt == "moses"
                  else [b"\t"] * len(self.names))
        fields, last_id = 0, None
        written = np.empty(0, np.uint8)
        for chunk in _chunks(f, batch * 64):
            (starts, hyp_a, hyp_b, ins, groups, fields, runs, last_id, err, index,
             found) = _rescore.scan(chunk, code, fields, last_id)
            if err:
                raise FormatError(_scan_message(self.fmt, err, found, fields),
                                  self.name, self.lines + index + 1)
            values = np.empty((len(self.models), len(hyp_a)), np.float32)
            for j, (m, sc) in enumerate(zip(self.models, self.scorers)):
                if sc is not None:
                    totals = sc.score(chunk, hyp_a, hyp_b, groups, self.threads or 1)
                else:
                    totals = _batch_scores(m, [bytes(chunk[a:b]) for a, b in zip(hyp_a.tolist(), hyp_b.tolist())],
                                           self.threads)
                values[j] = totals * self.scale if self.scale != 1.0 else totals
            need = _rescore.assembled_size(len(chunk), len(hyp_a), labels)
            if len(written) < need:
                written = np.empty(need + need // 4, np.uint8)
            out.write(written[:_rescore.assemble(chunk, starts, ins, labels, values, written)])
            self._advance(len(hyp_a), runs, len(chunk))

    def reranking(self, f, listing, ranker, batch):
        """Lines parsed one by one (their features are needed), scored in batches."""
        reader = _Reader(f, self.name, self.fmt)
        last = None
        for first, raw, parsed in reader.chunks(batch):
            cols = [self._scores(j, [p[0] for p in parsed], [p[1] for p in parsed])
                    for j in range(len(self.models))]
            cols = [np.asarray(c * self.scale if self.scale != 1.0 else c, np.float32) for c in cols]
            if listing is not None:
                added = _feature_text(self.fmt, self.names, [format_floats(c) for c in cols])
                listing.write(b"".join(_augmented(self.fmt, r, p[2], a)
                                       for r, p, a in zip(raw, parsed, added)))
            runs = 0
            for i, (sid, _, fields) in enumerate(parsed):
                runs += sid != last
                last = sid
                ranker.add(sid, fields, [c[i] for c in cols], first + i)
            self._advance(len(raw), runs, sum(map(len, raw)))

    def _scores(self, j, sids, hyps):
        """float64 totals of model j for parsed lines (ids ``sids``, hypotheses ``hyps``)."""
        sc = self.scorers[j]
        if sc is None:
            return _batch_scores(self.models[j], hyps, self.threads)
        lengths = np.fromiter(map(len, hyps), np.int64, count=len(hyps))
        ends = np.cumsum(lengths + 1) - 1
        starts = ends - lengths
        runs = [i for i in range(len(sids)) if i == 0 or sids[i] != sids[i - 1]]
        groups = np.array(runs + [len(sids)], np.int64)
        return sc.score(b"\n".join(hyps), starts, ends, groups, self.threads or 1)

    def _advance(self, lines, runs, size):
        self.lines += lines
        self.runs += runs
        if self.bar is not None:
            self.bar.update(size)


def _shared_scorer(model):
    """The kernel scorer of any nplm model (its LMCore, word by word: the same numbers
    as score()); None for another object with score_sentences."""
    if not isinstance(model, _kernels.ModelBase):
        return None
    return _rescore.SharedScorer(model.core, model.vocab, True, True)


def _batch_scores(model, hyps, threads):
    if threads is None:
        return np.asarray(model.score_sentences(hyps), np.float64)
    return np.asarray(model.score_sentences(hyps, threads=threads), np.float64)


def _chunks(f, size):
    """Complete lines of ``f`` in chunks of about ``size`` bytes (the last one may
    lack its newline; a longer line is one chunk), read into one buffer: each chunk
    is a view of it, valid until the next is asked for."""
    buf = np.empty(2 * size, np.uint8)
    have = 0                    # bytes of a line begun in the previous block
    while True:
        if have + size > len(buf):
            grown = np.empty(2 * (have + size), np.uint8)
            grown[:have] = buf[:have]
            buf = grown
        n = f.readinto(buf[have:have + size])
        if not n:
            if have:
                yield buf[:have]
            return
        end = have + n
        cut = _rescore.last_line_end(buf, have, end)
        if cut < 0:
            have = end
            continue
        yield buf[:cut]
        have = end - cut
        buf[:have] = buf[cut:end]


_SCAN_MESSAGES = {
    "empty": "empty line: expected a hypothesis",
    "moses_fields": "not a Moses n-best line (found {found} '|||'-separated field{s}; expected "
                    "'id ||| hypothesis ||| features ||| total')",
    "plain_fields": "not a plain n-best line (expected 'id<TAB>hypothesis[<TAB>score]...', found no tab)",
    "count": "{found} fields where line 1 has {fields}",
    "no_id": "no sentence id (the first field is empty)",
    "id_space": "the sentence id has white space in it",
}


def _scan_message(fmt, err, found, fields):
    key = {1: "empty", 2: f"{fmt}_fields", 3: "count", 4: "no_id", 5: "id_space"}[err]
    return _SCAN_MESSAGES[key].format(found=found, fields=fields, s="s" if found != 1 else "")


def _check_clash(features, names, path):
    have = {t[:-1].decode("utf-8", "replace") for f in features for t in f.split() if t.endswith(b"=")}
    clash = sorted(have & set(names))
    if clash:
        raise ValueError(f"{path} already has feature(s) {', '.join(clash)}: choose other names "
                         "for the added ones")
