"""A text scored with a KenLM binary and printed as KenLM's query program prints it,
in one kernel loop (``_query_text``): the program's path for KenLM binaries
(nplm/cli/kenlm/query.py).  Neither this module nor what it imports imports numpy or
nplm's model kernels: KenLM's query of a test set takes a few hundredths of a second
in all, about what importing numpy alone takes.  An ARPA file is built into KenLM's
probing structure in memory first (``arpa_query``), as KenLM's query builds it, with
the writers of build_binary, which do import numpy."""
import importlib

from nplm._threads import cpu_count
from nplm.backoff.kenlm import reader
from nplm.backoff.kenlm._query_text import MAX_ORDER, TextQuery
from nplm.errors import FormatError

__all__ = ["read_layout", "open_query", "arpa_query", "cpu_count", "MAX_ORDER"]


def read_layout(path):
    """(Header, layout, size) of the KenLM binary ``path`` (reader.read_layout)."""
    return reader.read_layout(path, MAX_ORDER)


def open_query(path, header, layout, load_method):
    """A TextQuery over the KenLM binary ``path`` (its header and layout read), the
    file loaded as ``load_method`` loads it, after what a LAZY load checks (the
    unigrams, the quantisation tables; every score is checked as it is printed)."""
    mem = reader.map_file(path, layout.end, load_method)
    try:
        query = TextQuery(mem, reader.tables(mem, header, layout, path), path)
        reader.check_values(mem, layout, None, path, records=False)
    except ValueError as e:
        if isinstance(e, FormatError):
            raise
        raise FormatError(f"corrupt KenLM binary ({e})", path) from None
    return query


def arpa_query(path):
    """A TextQuery over KenLM's probing model of the ARPA file ``path`` (of order 2 to
    MAX_ORDER), built in memory as KenLM's query builds it from an ARPA file: the
    file build_binary would write, so the vocabulary ids and scores are KenLM's."""
    mem = importlib.import_module("nplm.backoff.kenlm.write").probing_from_arpa(path)
    header, layout, _ = reader.buffer_layout(mem, path, MAX_ORDER)
    return TextQuery(mem, reader.tables(mem, header, layout, path), path)
