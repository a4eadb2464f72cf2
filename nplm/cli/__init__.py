"""``nplm <command>``: argument parsing and progress only; the work is in the library.
The entry point is ``nplm.cli.main.main``."""
