"""interpolate: log-linear interpolation of back-off models into one ARPA file, as
KenLM's interpolate does it (its command line, messages, exit codes, tuning and
ARPA bytes), with nplm.compose.exact_loglinear doing the work.

Models are KenLM's intermediate files (``lmplz --intermediate BASE`` then ``-m BASE``)
as for KenLM; nplm also takes an ARPA file's path where no BASE.kenlm_intermediate
exists.  ``nplm interpolate`` is nplm's own command: this program is reached by its
installed name (``interpolate``) or ``python -m nplm.cli.kenlm.interpolate``."""

import importlib
import os
import re
import sys

import numpy as np

from nplm.cli.kenlm import _options as po
from nplm.cli.kenlm._program import fail, program
from nplm.compose import exact_loglinear as el
from nplm.io.files import sniff

_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.I)


def to_float(word):
    """boost::lexical_cast<float>: the whole word a number."""
    if not _FLOAT.fullmatch(word):
        raise ValueError("")
    return float(np.float32(float(word)))


def parser():
    O = po.Option
    return po.Parser("Log-linear interpolation options", [
        O("help", "h", "switch", help="Show this help message"),
        O("model", "m", "multi", required=True, help=(
            "Models to interpolate, which must be in KenLM intermediate format.  The intermediate format "
            "can be generated using the --intermediate argument to lmplz.")),
        O("weight", "w", "multi", convert=to_float, help="Interpolation weights"),
        O("tuning", "t", help="File to tune on: a text file with one sentence per line"),
        O("just_tune", kind="switch", help="Tune and print weights then quit"),
        O("temp_prefix", "T", default="/tmp/lm", help="Temporary file prefix"),
        O("memory", "S", default="50%" if po.physical_memory() else "1G",
          help="Sorting memory: this is a very rough guide"),
        O("sort_block", default="64M", help="Block size"),
    ])


def munge_weights(argv):
    """KenLM's MungeWeightArgs: a negative number among -w's words gets its own -w
    (boost would take it for an option), except right after the -w."""
    out, inside = [], None
    for i, arg in enumerate(argv):
        if arg.startswith("-w") or arg.startswith("--w"):
            inside = i
        elif inside is not None and len(arg) >= 2 and arg[0] == "-" and arg[1] in "0123456789.":
            if inside + 1 != i:
                out.append("-w")
        elif arg.startswith("-"):
            inside = None
        out.append(arg)
    return out


def store(p, argv):
    """boost's store, where -m and -w may be given more than once (their words add up,
    as boost's vector options do)."""
    given = {}
    for opt, words in p.tokenize(argv):
        value = p._value(opt, words)
        if opt.kind == "multi" and opt.long in given:
            given[opt.long] = given[opt.long] + value
        elif opt.long in given:
            raise po.OptionError(f"option '{opt.display}' cannot be specified more than once",
                                 "multiple_occurrences")
        else:
            given[opt.long] = value
    return given


def say(line):
    print(line, file=sys.stderr, flush=True)


def load(name):
    """The component ``name``: KenLM's intermediate files of base ``name``, else the
    ARPA file ``name``."""
    if el.intermediate_exists(name) or not os.path.isfile(name):
        try:
            return el.read_intermediate(name)
        except FileNotFoundError as e:
            raise fail(f"No such file or directory while opening {e.filename}") from None
    kind, stream = sniff(name)
    stream.close()
    if kind != "arpa":
        raise fail(f"{name}: not KenLM intermediate files (no {name}.kenlm_intermediate) nor an ARPA file")
    return el.read_arpa_component(name)


@program("interpolate")
def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = parser()
    given = store(p, munge_weights(argv))
    if not argv or given.get("help"):
        sys.stderr.write("Interpolate multiple models\n" + p.format() + "\n")
        return 1
    v = p.notify(given)
    po.parse_size(v["memory"])
    po.parse_size(v["sort_block"])
    weights = v["weight"] or []
    if not weights and v["tuning"] is None:
        raise fail("Provide a tuning file with -t xor weights with -w.")
    if weights and v["tuning"] is not None:
        raise fail("Provide weights xor a tuning file, not both.")
    models = v["model"]
    union = None
    if v["tuning"] is not None:
        if not os.path.exists(v["tuning"]):
            raise fail(f"No such file or directory while opening {v['tuning']}")
        union = el.Union([load(m) for m in models])
        # (imported here, by name: tuning needs scipy.sparse, which -w need not load)
        tuning = importlib.import_module("nplm.compose.exact_loglinear_tune")
        weights = [float(x) for x in tuning.tune(union, v["tuning"], say, models)]
        sys.stderr.write("Final weights:")
        sys.stderr.flush()
        to = sys.stdout if v["just_tune"] else sys.stderr
        to.write("".join(f" {x:g}" for x in weights) + "\n")
        to.flush()
    if v["just_tune"]:
        return 0
    if len(weights) != len(models):
        raise fail(f"Number of models ({len(models)}) should match the number of weights ({len(weights)}).")
    if union is None:
        union = el.Union([load(m) for m in models])
    el.write_interpolated(union, weights, sys.stdout.buffer, say)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
