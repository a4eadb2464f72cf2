"""build_binary: KenLM's binary file (probing or trie) from an ARPA file, byte for byte
as KenLM's build_binary writes it, with its getopt command line, messages and exit
codes."""

import os
import re
import sys

from nplm.backoff.kenlm.write import build_binary_from_arpa
from nplm.cli.kenlm import _options as po
from nplm.cli.kenlm import _sizes
from nplm.cli.kenlm._program import ABORT, GetoptError, fail, gnu_getopt, in_place, program

USAGE = """\
Usage: {name} [-u log10_unknown_probability] [-s] [-i] [-v] [-w mmap|after] [-p probing_multiplier] \
[-T trie_temporary] [-S trie_building_mem] [-q bits] [-b bits] [-a bits] [type] input.arpa [output.mmap]

-u sets the log10 probability for <unk> if the ARPA file does not have one.
   Default is -100.  The ARPA file will always take precedence.
-s allows models to be built even if they do not have <s> and </s>.
-i allows buggy models from IRSTLM by mapping positive log probability to 0.
-v disables inclusion of the vocabulary in the binary file.
-w mmap|after determines how writing is done.
   mmap maps the binary file and writes to it.  Default for trie.
   after allocates anonymous memory, builds, and writes.  Default for probing.
-r "order1.arpa order2 order3 order4" adds lower-order rest costs from these
   model files.  order1.arpa must be an ARPA file.  All others may be ARPA or
   the same data structure as being built.  All files must have the same
   vocabulary.  For probing, the unigrams must be in the same order.

type is either probing or trie.  Default is probing.

probing uses a probing hash table.  It is the fastest but uses the most memory.
-p sets the space multiplier and must be >1.0.  The default is 1.5.

trie is a straightforward trie with bit-level packing.  It uses the least
memory and is still faster than SRI or IRST.  Building the trie format uses an
on-disk sort to save memory.
-T is the temporary directory prefix.  Default is the output file name.
-S determines memory use for sorting.  Default is {mem}.  This is compatible
   with GNU sort.  The number is followed by a unit: % for percent of physical
   memory, b for bytes, K for Kilobytes, M for megabytes, then G,T,P,E,Z,Y.  \n\
   Default unit is K for Kilobytes.
-q turns quantization on and sets the number of bits (e.g. -q 8).
-b sets backoff quantization bits.  Requires -q and defaults to that value.
-a compresses pointers using an array of offsets.  The parameter is the
   maximum number of bits encoded by the array.  Memory is minimized subject
   to the maximum, so pick 255 to minimize memory.

-h print this help message.

Get a memory estimate by passing an ARPA file without an output file name.
"""

RULER = ("----5---10---15---20---25---30---35---40---45---50---55---60---65---70---75---80---85---90---95--100\n")

# build_binary's process exit when it reports a usage error, and its abort() for -b alone
USAGE_EXIT, ABORT_EXIT = 1, ABORT


def program_name():
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return sys.argv[0] if name == "build_binary" else "build_binary"


def usage():
    sys.stderr.write(USAGE.format(name=program_name(), mem="80%" if po.physical_memory() else "1G"))
    return fail("", USAGE_EXIT)


def parse_float(word):
    """strtod with nothing after the number, as build_binary's ParseFloat."""
    try:
        return float(word)
    except ValueError:
        raise fail(f'Could not parse "{word}" into a float\nERROR') from None


def parse_bits(word):
    """strtoul into a byte, as build_binary's ParseBitCount: its check of the limit of
    25 builds an exception it never throws, so -a 255 means 255 and 300 means 44."""
    m = re.fullmatch(r"\s*([+-]?)([0-9]*)", word)
    if m is None or (m.group(1) and not m.group(2)):
        raise fail(f'Could not parse "{word}" into a number\nERROR')
    value = int(m.group(2) or 0)
    return (-value if m.group(1) == "-" else value) % 256


def settings(argv):
    """build_binary's options (GNU getopt: options may follow the files)."""
    try:
        opts, files = gnu_getopt(argv, "q:b:a:u:p:t:T:m:S:w:sir:vh")
    except GetoptError as e:
        print(f"{program_name()}: {e}", file=sys.stderr)
        raise usage() from None
    s = dict(options={}, quantize=False, backoff=False, rest=None, positive=False)
    for flag, value in opts:
        apply(s, flag, value)
    return s, files


# flag -> (option keyword, conversion); -T -t -S -m -w tune KenLM's building only
KEYWORDS = {"-q": ("prob_bits", parse_bits), "-b": ("backoff_bits", parse_bits), "-a": ("pointer_bits", parse_bits),
            "-u": ("unknown_logprob", parse_float), "-p": ("multiplier", parse_float),
            "-s": ("allow_missing_markers", lambda v: True), "-v": ("include_vocab", lambda v: False)}


def apply(s, flag, value):
    if flag in KEYWORDS:
        key, convert = KEYWORDS[flag]
        s["options"][key] = convert(value)
        s["quantize"] |= flag == "-q"
        s["backoff"] |= flag == "-b"
    elif flag == "-S":
        po.parse_size(value)
    elif flag == "-w" and value not in ("mmap", "after") or flag == "-h":
        raise usage()
    elif flag == "-i":
        s["positive"] = True
    elif flag == "-r":
        s["rest"] = value


def build(s, files):
    if len(files) == 2:
        kind, (source, out) = "probing", files
    elif len(files) == 3:
        kind, source, out = files
    else:
        raise usage()
    if kind not in ("probing", "trie"):
        raise usage()
    if kind == "probing" and (s["quantize"] or s["backoff"]):
        raise fail("Quantization is only implemented in the trie data structure.")
    if s["rest"] is not None:
        raise fail("Rest + trie is not supported yet." if kind == "trie"
                   else "-r (rest costs) is not supported by nplm's build_binary")
    if s["positive"]:
        raise fail("-i (positive log probabilities from IRSTLM) is not supported by nplm's build_binary")
    if os.path.islink(out):     # the file it names is replaced, not the link
        out = os.path.realpath(out)
    if in_place(out):
        raise fail(f"cannot write a binary model to {out}: it is memory-mapped from a file, so give a file name")
    if not os.path.exists(source):
        raise fail(f"No such file or directory while opening {source}\nERROR")
    if kind == "trie":
        s["options"].setdefault("backoff_bits", s["options"].get("prob_bits"))
        if s["options"]["backoff_bits"] is None:
            del s["options"]["backoff_bits"]
    sys.stderr.write(f"Reading {source}\n{RULER}")
    build_binary_from_arpa(source, out, kind, progress=False, **s["options"])
    sys.stderr.write("*" * 100 + "\nSUCCESS\n")
    return 0


@program("build_binary")
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--help"]:
        raise usage()
    s, files = settings(argv)
    if s["backoff"] and not s["quantize"]:
        raise fail("You specified backoff quantization (-b) but not probability quantization (-q)", ABORT_EXIT)
    if len(files) == 1:
        if not os.path.exists(files[0]):
            raise fail(f"No such file or directory while opening {files[0]}")
        sys.stderr.write(_sizes.estimate(files[0], s["options"]))
        return 0
    try:
        return build(s, files)
    except (ValueError, OSError) as e:
        if isinstance(e, OSError) and e.filename is not None:
            raise fail(f"{e.strerror} while creating {e.filename}\nERROR") from None
        raise fail(f"{e}\nERROR") from None


if __name__ == "__main__":
    sys.exit(main())
