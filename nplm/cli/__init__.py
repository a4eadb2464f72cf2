"""``nplm <command>``: argument parsing and progress only; the work is in the library."""
from nplm.cli.main import main

__all__ = ["main"]
