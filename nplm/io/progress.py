"""Progress bars: tqdm's, imported with the first bar.

Importing the tqdm package imports importlib.metadata (to read its own version) and
more, a noticeable part of starting ``nplm`` or ``import nplm``; most runs draw no
bar (stderr is not a terminal, ``-q``), so nplm's modules take ``tqdm`` from here.
"""
import importlib


def tqdm(*args, **kwargs):
    """``tqdm.tqdm(*args, **kwargs)``, importing tqdm on the first call."""
    return importlib.import_module("tqdm").tqdm(*args, **kwargs)
