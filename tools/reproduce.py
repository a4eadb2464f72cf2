#!/usr/bin/env python3
"""Reproduce the papers' PTB comparisons end to end and write a Markdown report.

    python tools/reproduce.py --data ../shared/data/ptb --out report/           # ~45 min on 2 cores
    python tools/reproduce.py --data ../shared/data/ptb --out /tmp/r --quick    # ~1 min, small subset

The same as ``nplm reproduce``; the pipeline lives in nplm/reproduce.py.
"""
import sys
from pathlib import Path

# Run from a source checkout without installing (the kernels built in place).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nplm.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["reproduce"] + sys.argv[1:]))
