"""``{nplm-cli}``: every ``nplm`` command's help, as ``nplm COMMAND --help`` prints it,
so the CLI reference cannot drift from the parser."""
import argparse
import os

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def _subparsers(parser):
    for action in parser._actions:                 # argparse keeps no public list of them
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


class NplmCli(SphinxDirective):
    has_content = False

    def run(self):
        from nplm.cli.main import build_parser
        os.environ["COLUMNS"] = "88"                # the same wrapping on every machine
        out = []
        for name, sub in sorted(_subparsers(build_parser()).items()):
            sub.prog = f"nplm {name}"
            out.append(nodes.rubric(text=f"nplm {name}", ids=[f"nplm-{name}"]))
            out.append(nodes.literal_block(text=sub.format_help(), language="text"))   # not Python
        return out


def setup(app):
    app.add_directive("nplm-cli", NplmCli)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
