"""Checking a model file completely (``nplm verify``).

Loading maps a binary without reading its arrays (that is what makes loads
instant), so a flipped bit inside an array is not noticed by ``nplm.Model``.
``verify`` reads everything: every array against its stored crc32, then a full
load, so a damaged file is reported instead of answering wrongly.  An interpolation
spec is verified component by component (each as thoroughly as on its own), then
loaded as a whole.
"""
import errno
import os

from nplm.backoff.kenlm import reader as kenlm_binary
from nplm.backoff.kenlm.export import check_tables as check_kenlm_tables
from nplm.compose.interpolate import MAX_SPEC_DEPTH, is_spec, read_spec, spec_cycle_error
from nplm.errors import FormatError
from nplm.io import container
from nplm.io.files import compression_name
from nplm.model import LoadMethod, Model, quiet_config


class Unreadable(OSError):
    """The file is missing or cannot be opened: nothing about its content is known.
    ``label`` is "MISSING" or "UNREADABLE"."""

    def __init__(self, path, err):
        self.label = "MISSING" if err.errno == errno.ENOENT else "UNREADABLE"
        reason = "no such file" if err.errno == errno.ENOENT else f"cannot be read ({err.strerror or err})"
        super().__init__(err.errno, reason)
        self.filename = path

    def __str__(self):
        return self.strerror


def _open_check(path):
    if os.path.isdir(path):
        raise Unreadable(path, OSError(errno.EISDIR, "is a directory"))
    try:
        with open(path, "rb") as f:
            return f.read(64)
    except OSError as e:
        raise Unreadable(path, e) from None


def _what(path, head, seen):
    """Description of the file's kind, after checking what can be checked without a load."""
    if container.is_container(path):
        c = container.read(path)
        c.verify()
        checked = sum(1 for s in c._specs.values() if s.get("crc32") is not None)
        what = f"nplm {c.kind} binary, {checked} of {len(c._specs)} arrays checksummed"
        q = c.config.get("quantized") if c.kind == "neural" else None
        if isinstance(q, dict) and q.get("dtype"):
            what = what.replace("neural", f"neural ({q['dtype']})", 1)
        return what
    if container.altered_magic(head):
        raise FormatError(container.ALTERED_MAGIC, path)
    if kenlm_binary.is_kenlm_binary(path):
        return check_kenlm_tables(path)
    if is_spec(path):
        spec = read_spec(path)
        parts = []
        for i, m in enumerate(spec["models"]):
            p = m if isinstance(m, str) else m["path"]
            shown = os.path.relpath(p, os.path.dirname(os.path.abspath(path)))
            try:
                desc = _verify(p, seen)
            except Unreadable as e:
                raise FormatError(f"component {i + 1} of {len(spec['models'])} ({shown}) is "
                                  f"{'missing' if e.label == 'MISSING' else 'unreadable'}: {e}", path) from None
            except (OSError, ValueError) as e:
                raise FormatError(f"component {i + 1} of {len(spec['models'])} ({shown}) is damaged: {e}",
                                  path) from None
            parts.append(f"{shown} [{desc}]")
        return (f"interpolation spec ({spec['mode']}, {len(parts)} components: {'; '.join(parts)})")
    kind = compression_name(head)
    return f"ARPA file ({kind})" if kind else "ARPA file"


def _verify(path, seen):
    path = os.fspath(path)
    key = os.path.realpath(path)
    if key in seen:
        raise spec_cycle_error(seen, key, path)
    if len(seen) > MAX_SPEC_DEPTH:      # (seen holds the specs above this file)
        raise FormatError(f"interpolation specs nested more than {MAX_SPEC_DEPTH} deep", path)
    head = _open_check(path)
    what = _what(path, head, seen + (key,))
    model = Model(path, quiet_config(LoadMethod.LAZY))
    return f"{what}, order {model.order}, {len(model.vocab)} words"


def verify(path):
    """Raise Unreadable (an OSError) when ``path`` is missing or cannot be opened,
    FormatError / ModelLoadError naming it when the model file is damaged; return a
    one-line description when it is sound."""
    return _verify(path, ()) + ": OK"
