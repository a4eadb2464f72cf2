"""build_binary's memory estimate (an ARPA file and no output name): the bytes each
of KenLM's six structures would take for the file's counts, in KenLM's table."""

import math

import numpy as np

from nplm.backoff.kenlm import format as kfmt
from nplm.io.resources import arpa_header_counts


def sizes(counts, multiplier, prob_bits, backoff_bits, pointer_bits):
    """Bytes of probing, rest probing, trie, quantised trie, array trie and quantised
    array trie (the header left out, as KenLM's Model::Size leaves it)."""
    out = []
    for kind in range(6):
        header = kfmt.Header(len(counts), float(np.float32(multiplier)), kind, True,
                             kfmt.SEARCH_VERSION[kind], tuple(counts))
        layout = (kfmt.probing_layout(header) if kind in (kfmt.PROBING, kfmt.REST_PROBING)
                  else kfmt.trie_layout(header, prob_bits, backoff_bits, pointer_bits))
        out.append(layout.end - header.size)
    return out


def _unit(smallest):
    for prefix, divide in ((" ", 1), ("k", 1 << 10), ("M", 1 << 20)):
        if smallest < divide * (1 << 10) * 10:
            return prefix, divide
    return "G", 1 << 30


def table(counts, multiplier=1.5, prob_bits=8, backoff_bits=8, pointer_bits=22):
    """KenLM's ShowSizes text."""
    s = sizes(counts, multiplier, prob_bits, backoff_bits, pointer_bits)
    prefix, divide = _unit(min(s))
    width = max(2, math.ceil(math.log10(max(s) / divide)))
    p, q, b, a = f"{multiplier:g}", prob_bits, backoff_bits, pointer_bits
    rows = [("probing", f"assuming -p {p}"), ("probing", f"assuming -r models -p {p}"),
            ("trie", "without quantization"), ("trie", f"assuming -q {q} -b {b} quantization "),
            ("trie", f"assuming -a {a} array pointer compression"),
            ("trie", f"assuming -a {a} -q {q} -b {b} array pointer compression and quantization")]
    lines = ["Memory estimate for binary LM:", "type    " + " " * (width - 2) + prefix + "B"]
    lines += [f"{name:<8}{size // divide:>{width}} {text}" for (name, text), size in zip(rows, s)]
    return "\n".join(lines) + "\n"


def estimate(path, options):
    """The table for ARPA file ``path`` with build_binary's options (-p, -q, -b, -a)."""
    counts = arpa_header_counts(path)
    if not counts:
        raise ValueError(f"{path}: no ARPA header with n-gram counts\nERROR")
    q = options.get("prob_bits", 8)
    return table(counts, options.get("multiplier", 1.5), q, options.get("backoff_bits", q),
                 options.get("pointer_bits", 22))
