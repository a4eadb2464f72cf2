"""count_ngrams: the highest-order n-grams of standard input and their counts, as
KenLM's count_ngrams writes them on standard output (records of ``order`` uint32 word
ids then a uint64 count, in suffix order), with the vocabulary as null-terminated
strings in id order (--write_vocab_list), or the ids of a vocabulary table
(--read_vocab_table: KenLM's probing hash table of word hashes, a uint64 size first)."""

import sys

import numpy as np

from nplm.backoff.estimate.config import EstimateConfig
from nplm.backoff.estimate.counts import count_text, renumbered
from nplm.backoff.estimate.report import Report
from nplm.backoff.kenlm._klm import hash_word
from nplm.cli.kenlm import _options as po
from nplm.cli.kenlm._estimate import stdin_named
from nplm.cli.kenlm._program import ABORT, fail, in_place, open_in_place, program
from nplm.errors import FormatError
from nplm.io.atomic import atomic_write, check_output
from nplm.io.text import word_bytes

ABORT_EXIT = ABORT    # KenLM counts in a worker thread: its exceptions abort


def parser():
    O = po.Option
    return po.Parser("corpus count", [
        O("help", "h", "switch", help="Show this help message"),
        O("order", "o", convert=po.to_unsigned(32), required=True, help="Order"),
        O("temp_prefix", "T", default=po.default_temp_prefix(), help="Temporary file prefix"),
        O("memory", "S", default="80%", help="RAM"),
        O("read_vocab_table", help=(
            "Vocabulary hash table to read.  This should be a probing hash table with size at the beginning.")),
        O("write_vocab_list", help="Vocabulary list to write as null-delimited strings."),
    ])


def count(order, memory, temp_prefix):
    """(vocabulary, keys, counts) of standard input, n-grams in suffix order."""
    shard = count_shard(order, memory, temp_prefix)
    return shard.vocab, shard.keys, shard.counts


def count_shard(order, memory, temp_prefix):
    """The ShardCounts of standard input."""
    config = EstimateConfig.make(order, memory=memory, temp_prefix=temp_prefix, progress=False)
    try:
        shard = count_text(stdin_named(), config, Report(False, 1))
    except FormatError as e:
        raise fail(str(e), ABORT_EXIT) from None
    if shard.stats["unk_tokens"]:
        raise fail("Special word <unk> is not allowed in the corpus.  I plan to support models containing "
                   "<unk> in the future.  Pass --skip_symbols to convert these symbols to whitespace.",
                   ABORT_EXIT)
    return shard


def records(keys, counts, order, specials=(0, 1)):
    """KenLM's NGram<uint64_t> records, packed: the word ids, then the count.  Of
    unigrams KenLM also writes <unk> and <s> (ids ``specials``), with count 0."""
    if order == 1:
        missing = np.setdiff1d(np.array(specials, dtype=np.uint32), np.asarray(keys).reshape(-1))
        keys = np.concatenate([missing.reshape(-1, 1), np.asarray(keys).reshape(-1, 1)])
        counts = np.concatenate([np.zeros(len(missing), dtype=np.uint64), counts])
    out = np.empty(len(counts), dtype=[("w", "<u4", (order,)), ("c", "<u8")])
    out["w"] = keys
    out["c"] = counts
    return out


def uncaught(kind, message):
    """count_ngrams catches nothing: the C++ runtime reports the exception and aborts."""
    return fail(f"terminate called after throwing an instance of '{kind}'\n  what():  {message}", ABORT_EXIT)


def settings(argv):
    """The options' values (None: help printed); errors as count_ngrams dies of them."""
    p = parser()
    try:
        given = p.store(argv)
        if not argv or given.get("help"):
            sys.stderr.write("Counts n-grams from standard input.\n" + p.format() + "\n")
            return None
        v = p.notify(given)
    except po.OptionError as e:
        raise uncaught(e.kind, e) from None
    try:
        v["memory"] = po.parse_size(v["memory"])
    except ValueError as e:
        raise uncaught("util::(anonymous namespace)::SizeParseError", e) from None
    return v


@program("count_ngrams")
def main(argv=None):
    v = settings(sys.argv[1:] if argv is None else list(argv))
    if v is None:
        return 1
    memory = v["memory"]
    if (v["read_vocab_table"] is None) == (v["write_vocab_list"] is None):
        raise fail("Specify one of --read_vocab_table or --write_vocab_list for vocabulary handling.")
    if v["order"] < 1:
        raise fail(f"the order must be at least 1, not {v['order']}")
    if v["read_vocab_table"] is not None:
        table = read_vocab_table(v["read_vocab_table"])
        shard = count_shard(v["order"], memory, po.normalize_temp_prefix(v["temp_prefix"]))
        keys, counts, specials = given_ids(shard, table)
        sys.stdout.buffer.write(records(keys, counts, v["order"], specials).tobytes())
        return 0
    vocab_path = stream_vocab(v["write_vocab_list"])
    words, keys, counts = count(v["order"], memory, po.normalize_temp_prefix(v["temp_prefix"]))
    with vocab_path as f:
        f.write(b"".join(w.encode("utf-8") + b"\0" for w in words))
    sys.stdout.buffer.write(records(keys, counts, v["order"]).tobytes())
    return 0


VOCAB_ENTRY = np.dtype([("key", "<u8"), ("value", "<u4")])     # KenLM's ProbingVocabularyEntry, packed


def read_vocab_table(path):
    """{MurmurHash64A of a word: its id} of KenLM's probing vocabulary table (a
    uint64 size, then 12-byte entries; key 0 is an empty bucket)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise uncaught("util::ErrnoException", f"{e.strerror} while opening {path}") from None
    if len(data) < 8:
        raise fail(f"{path}: too short for a vocabulary table", ABORT_EXIT)
    entries = np.frombuffer(data, dtype=VOCAB_ENTRY, count=(len(data) - 8) // VOCAB_ENTRY.itemsize, offset=8)
    used = entries[entries["key"] != 0]
    return dict(zip(used["key"].tolist(), used["value"].tolist()))


def given_ids(shard, table):
    """The shard's n-grams in the table's ids, in suffix order: (keys, counts, the ids
    of <unk> and <s>).  A word the table does not hold is <unk> to KenLM, which then
    refuses it as a special word; so is <s> or </s> in the text."""
    ids = np.array([table.get(hash_word(word_bytes(w)), 0) for w in shard.vocab], dtype=np.int64)
    bos, eos = table.get(hash_word(b"<s>"), 0), table.get(hash_word(b"</s>"), 0)
    ids[0], ids[1], ids[2] = 0, bos, eos
    used = np.zeros(len(ids), dtype=bool)
    used[np.unique(shard.keys)] = True
    special = np.isin(ids, [0, bos, eos]) & used
    special[:3] = False
    if special.any():
        word = shard.vocab[int(np.flatnonzero(special)[0])]
        raise fail("Special word " + word + " is not allowed in the corpus.  I plan to support models containing "
                   "<unk> in the future.  Pass --skip_symbols to convert these symbols to whitespace.", ABORT_EXIT)
    keys, counts = renumbered(shard, ids)
    return keys, counts, (0, bos)


def stream_vocab(path):
    """The vocabulary list's file: a device or pipe written in place, a file atomically."""
    if in_place(path):
        return open(open_in_place(path), "wb")
    check_output(path)
    return atomic_write(path, "wb")


if __name__ == "__main__":
    sys.exit(main())
