"""Progress of an estimation on stderr: lmplz's stage headers and statistics, and
tqdm bars per stage and per pass of the partitioned estimation (only on a terminal)."""
import sys
import warnings

from nplm.io.progress import tqdm


class Report:
    """lmplz-style stage headers and statistics on stderr, and a progress bar for each
    stage, in the tqdm style of every nplm command, drawn only when stderr is a terminal
    (a pipe or a log gets the headers and statistics alone)."""

    def __init__(self, enabled, stages):
        self.enabled = enabled
        self.stages = stages
        self.bar = None

    def say(self, message):
        if self.enabled:
            print(message, file=sys.stderr, flush=True)

    def notice(self, message):
        """Something the user must hear about even when progress is off."""
        if self.enabled:
            print(message, file=sys.stderr, flush=True)
        else:
            warnings.warn(message, stacklevel=3)

    def stage(self, number, title):
        self.say(f"=== {number}/{self.stages} {title} ===")

    def start(self, total):
        """A bar for ``total`` units of work; none when the total is unknown (0) or
        stderr is no terminal (which spares the import of tqdm)."""
        self.finish()
        if self.enabled and int(total) > 0 and sys.stderr.isatty():
            self.bar = tqdm(total=int(total), unit="", unit_scale=True, file=sys.stderr, leave=False,
                            mininterval=0.5)

    def update(self, done):
        if self.bar is not None and not self.bar.disable:
            self.bar.update(min(int(done), self.bar.total) - self.bar.n)

    def finish(self):
        if self.bar is not None:
            self.bar.close()
        self.bar = None

    def passes(self, items, description, total=None):
        """``items``, with a tqdm bar when progress is on and stderr is a terminal."""
        if not (self.enabled and sys.stderr.isatty()):
            return items
        return tqdm(items, desc=description, total=total, unit="part", leave=False)
