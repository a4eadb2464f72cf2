"""Sphinx configuration: Markdown pages (MyST), API reference by autodoc + numpydoc.

Build from the repository root, with the kernels built (``pip install -e ".[docs]"``):
``sphinx-build -W -b html docs docs/_build/html``.
"""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "_ext"))

import nplm  # noqa: E402  (the package documented; needs its kernels built)

project = "nplm"
author = "the nplm authors"
copyright = "the nplm authors, MIT license"
release = nplm.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "nplm_cli",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3

autosummary_generate = False
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
numpydoc_show_class_members = False
numpydoc_validation_checks = set()

html_theme = "alabaster"
html_static_path = ["_static"]
html_css_files = ["nplm.css"]   # wide tables and code blocks scroll within the column
