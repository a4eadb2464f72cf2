"""Text as KenLM reads it: words split at ASCII white space.

A word is its bytes, as in KenLM, whatever the encoding: where a str is needed it is
``word_str(raw)`` (UTF-8, each byte that is not UTF-8 as a lone surrogate, PEP 383),
and ``word_bytes(word)`` gives the bytes back, so Latin-1 or any other 8-bit text
round-trips exactly and UTF-8 text reads as it always did."""
import re
import sys

from nplm.errors import FormatError
from nplm.io.files import open_binary, open_text

# Characters str.split() splits at but KenLM does not: its delimiters (util::kSpaces)
# are the ASCII \t \n \v \f \r and space, the set bytes.split() uses.
_NON_KENLM_SPACE = re.compile("[\x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")


def split_words(line):
    """The words of ``line`` (str or bytes) as KenLM and nplm's scoring kernels split
    them: at ASCII white space only, so a U+00A0 or U+3000 inside a word keeps it one
    word.  Everything that turns text into words (training, clustering, counting,
    tuning) uses this, so that a model's vocabulary holds the words it is scored on."""
    if isinstance(line, (bytes, bytearray)):
        return line.split()
    if _NON_KENLM_SPACE.search(line) is None:
        return line.split()        # the same split, and the fast path
    return [w.decode("utf-8", "surrogatepass") for w in line.encode("utf-8", "surrogatepass").split()]


def word_str(raw):
    """The str of the bytes ``raw`` (a word, a line): byte-faithful, never an error."""
    return raw.decode("utf-8", "surrogateescape")


def word_bytes(word):
    """The bytes of ``word`` (str from word_str or any UTF-8 text; bytes as they are)."""
    return word.encode("utf-8", "surrogateescape") if isinstance(word, str) else bytes(word)


def open_lines(path):
    """A text reader of ``path`` ('-' is stdin; may be compressed) whose lines hold
    each byte that is not UTF-8 as word_str's surrogate: the scoring commands' input."""
    return open_text(path, errors="surrogateescape")


def faithful_stdout():
    """sys.stdout, set to write word_str's surrogates back as the bytes they came from
    (a word of Latin-1 text is printed as KenLM prints it)."""
    out = sys.stdout
    if getattr(out, "errors", "surrogateescape") != "surrogateescape" and hasattr(out, "reconfigure"):
        out.reconfigure(errors="surrogateescape")
    return out


def utf8_lines(path):
    """The lines of UTF-8 text ``path`` (plain or compressed; '-' is stdin) as str,
    newlines kept.  Invalid UTF-8 is a FormatError naming the file and line: lines are
    decoded one by one, where a text wrapper decodes ahead in chunks and its
    UnicodeDecodeError names neither."""
    with open_binary(path) as f:
        for line_no, raw in enumerate(f, 1):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise FormatError(f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start + 1} of the "
                                  "line); the text must be UTF-8", "-" if path is None else path,
                                  line_no) from None
