"""The header of KenLM's binary files (format version 5, x86-64; lm/binary_format.cc)
and the sizes that follow from it."""
import numpy as np

PROBING, TRIE = "probing", "trie"
MAGIC = b"mmap lm http://kheafield.com/code format version 5\n\0"
_SANITY_SIZE = 88            # magic padded to 8, 3 floats, 3 uint32, 1 uint64
_FIXED_SIZE = 20             # order, multiplier, model type, has vocabulary, version
_MODEL_TYPES = {(PROBING, False, False): 0, (TRIE, False, False): 2, (TRIE, True, False): 3,
                (TRIE, False, True): 4, (TRIE, True, True): 5}
DEFAULT_MULTIPLIER = 1.5
DEFAULT_UNKNOWN_LOGPROB = -100.0


def _align8(n):
    return (n + 7) // 8 * 8


def header_size(order):
    return _align8(_SANITY_SIZE + _FIXED_SIZE + 8 * order)


def header_bytes(order, model_type, search_version, counts, multiplier, has_vocab):
    """The header KenLM writes (binary_format.cc): sanity values, then the fixed
    parameters, then the counts; zero padding."""
    out = bytearray(header_size(order))
    out[:len(MAGIC)] = MAGIC
    o = _align8(len(MAGIC) + 1)
    np.frombuffer(out, np.float32, 3, o)[:] = (0.0, 1.0, -0.5)
    np.frombuffer(out, np.uint32, 2, o + 12)[:] = (1, 0xFFFFFFFF)
    np.frombuffer(out, np.uint64, 1, o + 24)[:] = 1
    f = _SANITY_SIZE
    out[f] = order
    np.frombuffer(out, np.float32, 1, f + 4)[:] = multiplier
    np.frombuffer(out, np.uint32, 1, f + 8)[:] = model_type
    out[f + 12] = 1 if has_vocab else 0
    np.frombuffer(out, np.uint32, 1, f + 16)[:] = search_version
    np.frombuffer(out, np.uint64, order, f + _FIXED_SIZE)[:] = counts
    return bytes(out)


def probing_buckets(entries, multiplier):
    """KenLM's ProbingHashTable::Size: max(entries + 1, multiplier * entries), the
    product in float32 and truncated."""
    scaled = int(np.float32(multiplier) * np.float32(entries))
    return max(int(entries) + 1, scaled)




def model_type(kind, quantised, array_pointers):
    """The header's model type number (lm/model_type.hh)."""
    return _MODEL_TYPES[(kind, quantised, array_pointers)]
