"""Type stubs of the extension module nplm.neural._netcore (written by tools/make_stubs.py)."""

