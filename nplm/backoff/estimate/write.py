"""Stage 5, writing: what survived pruning, as NGramTables, an ARPA file (lmplz's
layout, byte for byte) or an nplm binary."""
import sys

import numpy as np

from nplm.backoff.arpa import write_arpa, write_sections
from nplm.backoff.kenlm.write import build_binary
from nplm.backoff.tables import NGramTables
from nplm.io.atomic import text_output


def renumbering(mark1, vocab):
    """(new id of each word or None when no unigram was pruned, kept vocabulary)."""
    keep1 = mark1 == 0
    if keep1.all():
        return None, vocab
    new_id = np.cumsum(keep1, dtype=np.int64).astype(np.int32) - 1
    return new_id, [w for w, k in zip(vocab, keep1) if k]


def kept_rows(words, logprob, backoff, mark, new_id):
    """One order's unpruned rows, words renumbered."""
    if mark.any():
        keep = mark == 0
        words, logprob, backoff = words[keep], logprob[keep], backoff[keep]
    if new_id is not None:
        words = new_id[words]
    return np.ascontiguousarray(words, dtype=np.int32), logprob, backoff


def header_comments(config, name, tokens):
    if not config.verbose_header:
        return []
    return [f"Input file: {name}", f"Token count: {tokens}", "Smoothing: Modified Kneser-Ney"]


def tables(vocab, words, logprob, backoff, mark, comments):
    """NGramTables from the in-memory arrays per order (released as they are used)."""
    order = len(logprob)
    new_id, vocab = renumbering(mark[0], vocab)
    keep1 = mark[0] == 0
    ids = [np.arange(len(vocab), dtype=np.int32)[:, None]]
    lp = [logprob[0] if new_id is None else logprob[0][keep1]]
    bo = [backoff[0] if new_id is None else backoff[0][keep1]]
    for i in range(1, order):
        w, p, b = kept_rows(words[i], logprob[i], backoff[i], mark[i], new_id)
        ids.append(w)
        lp.append(p)
        bo.append(b)
        words[i] = logprob[i] = backoff[i] = None
    bo[-1] = np.zeros(len(lp[-1]), dtype=np.float32)
    return NGramTables(vocab=vocab, ids=ids, logprob=lp, backoff=bo, comments=comments)


def write_outputs(model, arpa, binary, report):
    """Write NGramTables ``model`` as ARPA ('-' = stdout) and/or a binary, given as
    (path, type, build_binary's options)."""
    if arpa is not None:
        report.stage(5, "Writing ARPA model")
        if arpa == "-":
            write_arpa(model, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            write_arpa(model, arpa)
    if binary is not None:
        report.stage(5, "Writing binary model")
        path, kind, options = binary
        build_binary(model, path, kind, **options)


def stream_arpa(arpa, vocab, counts, comments, blocks):
    """Write an ARPA file whose orders come in blocks (see ``write_sections``)."""
    with text_output(arpa) as f:
        write_sections(f, vocab, counts, comments, blocks)
