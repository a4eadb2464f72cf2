"""KenLM's programs under their own names (lmplz, build_binary, query, filter,
count_ngrams, fragment, interpolate): the same command lines, outputs and exit codes,
with nplm's library doing the work.  Each module has ``main(argv=None) -> int``
(``argv`` without the program's name); ``nplm lmplz ARGS...`` runs the same (for the names
that are not nplm's own commands: not query or interpolate)."""

PROGRAMS = {
    "lmplz": "nplm.cli.kenlm.lmplz",
    "build_binary": "nplm.cli.kenlm.build_binary",
    "query": "nplm.cli.kenlm.query",
    "filter": "nplm.cli.kenlm.filter",
    "count_ngrams": "nplm.cli.kenlm.count_ngrams",
    "fragment": "nplm.cli.kenlm.fragment",
    # (`nplm interpolate` stays nplm's own command: this one is reached by its name)
    "interpolate": "nplm.cli.kenlm.interpolate",
}


def run(name, argv):
    """Run program ``name`` with ``argv`` (without the program's name); its exit code."""
    import importlib

    return importlib.import_module(PROGRAMS[name]).main(list(argv))
