"""Opening KenLM binary files (``build_binary`` output) as nplm models.

The file is mapped as it is (nothing is parsed into Python objects or copied, except
with LoadMethod.READ, which reads it into memory as kenlm does); the query engines of
``_query`` read KenLM's own tables.  Every header field and every offset derived
from it is checked against the file before anything is mapped, so a foreign,
truncated or corrupt file is a FormatError naming it, never a crash.
"""
import importlib
import mmap
import os
import struct

from nplm.backoff.kenlm import format as fmt
from nplm.errors import FormatError

# The header, the layout and the tables' description (``read_layout``, ``tables``)
# need neither numpy nor the model kernels, so that the query program on a KenLM
# binary (nplm.backoff.kenlm._query_text) starts without them; ``load`` imports them.

# nplm's LoadMethod values (kenlm's util::LoadMethod).
LAZY, POPULATE_OR_LAZY, POPULATE_OR_READ, READ, PARALLEL_READ = range(5)


def is_kenlm_binary(path):
    """Whether ``path`` starts like a KenLM binary (of any version, or unfinished)."""
    try:
        with open(path, "rb") as f:
            return fmt.looks_like_kenlm(f.read(len(fmt.MAGIC_PREFIX)))
    except OSError:
        return False


class KenlmData:
    """A loaded KenLM binary: the scorer, the vocabulary, the header and layout, and
    the mapping they read."""

    def __init__(self, core, vocab, header, layout, mem):
        self.core = core
        self.vocab = vocab
        self.header = header
        self.layout = layout
        self.mem = mem
        self.config = {"kenlm": header.model_name, "order": header.order, "counts": list(header.counts)}


def read_layout(path, max_order=None):
    """(Header, layout, file size) of a KenLM binary; FormatError naming ``path``.
    ``max_order``: the highest order accepted (default: the query kernels')."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return _read_layout(f.read(4096), size, lambda offset, n: os.pread(f.fileno(), n, offset), path,
                            max_order)


def buffer_layout(mem, path, max_order=None):
    """read_layout of a KenLM binary held in the byte buffer ``mem`` (``path`` names it
    in errors)."""
    view = memoryview(mem)
    return _read_layout(bytes(view[:4096]), len(view), lambda offset, n: bytes(view[offset:offset + n]), path,
                        max_order)


def _read_layout(head, size, pread, path, max_order):
    if max_order is None:
        max_order = importlib.import_module("nplm._kernels").QUERY_MAX_ORDER

    def read(offset, n):
        if offset + n > size:
            raise fmt.KenlmFormatError(f"truncated KenLM binary file ({size} bytes; its header places "
                                       f"data at byte {offset + n})")
        return pread(offset, n)
    try:
        header = fmt.parse_header(head, size, max_order)
        layout = fmt.layout(header, read)
    except fmt.KenlmFormatError as e:
        raise FormatError(str(e), path) from None
    if layout.end > size:
        raise FormatError(f"truncated KenLM binary file (or corrupt counts): {size} bytes, but its header "
                          f"({header.model_name}, counts {list(header.counts)}) needs {layout.end}", path)
    return header, layout, size


def map_file(path, length, load_method):
    """The first ``length`` bytes of the file loaded as kenlm's ``load_method`` loads
    it: read into a bytearray (READ, PARALLEL_READ), else a read-only mmap."""
    with open(path, "rb") as f:
        if load_method in (READ, PARALLEL_READ):
            buf = bytearray(length)
            got = f.readinto(buf)
            if got != length:
                raise FormatError(f"file shrank while being read ({got} of {length} bytes)", path)
            return buf
        flags = mmap.MAP_SHARED
        if load_method in (POPULATE_OR_LAZY, POPULATE_OR_READ) and hasattr(mmap, "MAP_POPULATE"):
            flags |= mmap.MAP_POPULATE
        return mmap.mmap(f.fileno(), length, flags=flags, prot=mmap.PROT_READ)


def _map(path, length, load_method):
    """map_file's bytes as a read-only uint8 array, a mapping guarded against
    truncation (an exception, not SIGBUS)."""
    np = importlib.import_module("numpy")
    mem = map_file(path, length, load_method)
    if isinstance(mem, mmap.mmap):
        importlib.import_module("nplm.io._mapguard").guard(mem, path)
    arr = np.frombuffer(mem, dtype=np.uint8)
    arr.setflags(write=False)
    return arr


def _strings_loader(path, header, layout, size):
    """A function reading the vocabulary strings, after checking that they begin with
    "<unk>\\0" where the layout puts them (KenLM's own check); None without them."""
    if not header.has_vocabulary:
        return None
    with open(path, "rb") as f:
        first = os.pread(f.fileno(), 6, layout.end)
    if first != b"<unk>\0":
        raise FormatError(f"the vocabulary strings are not where the header places them (byte {layout.end}): "
                          f"corrupt counts or a truncated file", path)

    words = header.counts[0]

    def load():
        # the strings end at the vocabulary's last NUL: read up to it, not to the end
        # of the file (bytes appended to a KenLM binary are never read)
        chunks, found, at = [], 0, layout.end
        with open(path, "rb") as f:
            while found < words and at < size:
                chunk = os.pread(f.fileno(), min(1 << 20, size - at), at)
                if not chunk:
                    break
                chunks.append(chunk)
                found += chunk.count(b"\0")
                at += len(chunk)
        return b"".join(chunks)
    return load


def load(path, load_method=POPULATE_OR_READ):
    """KenlmData of the KenLM binary ``path``."""
    path = os.fspath(path)
    header, layout, size = read_layout(path)
    strings = _strings_loader(path, header, layout, size)
    if strings is not None and load_method in (READ, PARALLEL_READ):
        # READ holds everything the model will read: the words too, read now, so that a
        # file replaced, truncated or removed afterwards changes nothing
        held = strings()
        strings = lambda: held         # noqa: E731
    mem = _map(path, layout.end, load_method)
    try:
        vocab, core = _model(mem, tables(mem, header, layout, path), strings, path)
        check_values(mem, layout, core, path, records=load_method != LAZY)
    except ValueError as e:
        if isinstance(e, FormatError):
            raise
        raise FormatError(f"corrupt KenLM binary ({e})", path) from None
    return KenlmData(core, vocab, header, layout, mem)


def check_values(mem, layout, core, path, records=True):
    """Refuse values no model holds and a trie's records out of order (check.py);
    ``records``: every n-gram's too, else the unigrams' and quantisation tables'."""
    check = importlib.import_module("nplm.backoff.kenlm.check")
    if layout.header.is_trie:
        check.check_trie(mem, layout, core, path, records)
    else:
        check.check_probing(mem, layout, path, records)


def _u32(mem, offset):
    return struct.unpack_from("<I", mem, offset)[0]


def _u64(mem, offset):
    return struct.unpack_from("<Q", mem, offset)[0]


def tables(mem, header, layout, path):
    """What the query kernels need to read the tables of the file mapped as ``mem``
    (any byte buffer), after checking the vocabulary's header and the trie's first
    pointers: a dict with ``trie``, ``order``, ``unigram`` (offset, entries),
    ``vocab`` (offset, entries, sorted, words) and, for probing, ``middle``,
    ``longest`` and ``rest``, for a trie ``orders`` (set_trie's dicts)."""
    if header.is_trie:
        return _trie_tables(mem, header, layout, path)
    return _probing_tables(mem, header, layout, path)


def _probing_tables(mem, header, layout, path):
    version, bound = _u32(mem, layout.vocab_header.offset), _u32(mem, layout.vocab_header.offset + 4)
    if version != fmt.PROBING_VOCAB_VERSION:
        raise FormatError(f"probing vocabulary version {version}; this reader reads "
                          f"{fmt.PROBING_VOCAB_VERSION}", path)
    if not 1 <= bound <= layout.unigram.buckets:
        raise FormatError(f"corrupt vocabulary header ({bound} words, {layout.unigram.buckets} unigrams)", path)
    return {"trie": False, "order": header.order, "vocab": (layout.vocab.offset, layout.vocab.buckets, False, bound),
            "unigram": (layout.unigram.offset, layout.unigram.buckets),
            "middle": [(t.offset, t.buckets) for t in layout.middle],
            "longest": (layout.longest.offset, layout.longest.buckets), "rest": layout.rest}


def _bitpacked(b, max_vocab, quant=None, k=None):
    d = {"base": b.base, "entries": b.entries, "max_vocab": max_vocab, "word_bits": b.word_bits,
         "value_bits": b.value_bits, "next_bits": b.next_bits, "array": b.array, "array_count": b.array_count}
    if quant is not None:
        d["prob_bits"], d["backoff_bits"] = quant.prob_bits, quant.backoff_bits
        if k is None:
            d["prob_table"] = quant.longest
        else:
            d["prob_table"], d["backoff_table"] = quant.middle[k]
    return d


def _trie_tables(mem, header, layout, path):
    counts = header.counts
    stored = _u64(mem, layout.vocab.offset)
    if stored >= counts[0]:
        raise FormatError(f"corrupt vocabulary ({stored} words besides <unk>, header counts {counts[0]})", path)
    # The pointer after the last unigram ends the bigrams (cheap check of the counts).
    uni = layout.unigram
    first = _u64(mem, uni.offset + 8)
    last = _u64(mem, uni.offset + 16 * counts[0] + 8)
    if first != 0 or last != counts[1]:
        raise FormatError(f"corrupt trie: unigram pointers {first}..{last}, expected 0..{counts[1]} bigrams", path)
    orders = [_bitpacked(m, counts[0], layout.quant, k) for k, m in enumerate(layout.middle)]
    orders.append(_bitpacked(layout.longest, counts[0], layout.quant))
    return {"trie": True, "order": header.order, "vocab": (layout.vocab.offset + 8, stored, True, stored + 1),
            "unigram": (uni.offset, uni.buckets), "orders": orders}


def _model(mem, t, strings, path):
    """(KenlmVocab, core) of the tables ``t`` (``tables``) in ``mem``."""
    klm = importlib.import_module("nplm.backoff.kenlm._klm")
    offset, entries, sorted_hashes, size = t["vocab"]
    vocab = klm.KenlmVocab(mem, sorted_hashes, offset, entries, size, strings, path)
    bos, eos = vocab.id("<s>"), vocab.id("</s>")
    if t["trie"]:
        core = klm.KenlmTrieCore(mem, t["order"], t["unigram"], t["orders"], bos, eos)
    else:
        core = klm.KenlmProbingCore(mem, t["order"], t["unigram"], t["middle"], t["longest"], t["rest"], bos, eos)
    core.path = path
    return vocab, core
