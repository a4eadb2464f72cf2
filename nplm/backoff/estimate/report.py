"""Progress of an estimation on stderr: lmplz's stage headers and 100-star bars,
and a tqdm bar per pass of the partitioned estimation (only on a terminal)."""
import sys
import warnings

from tqdm import tqdm


class Report:
    """lmplz-style stage headers and 100-star progress bars on stderr."""

    RULER = "".join(f"{p:->5}" for p in range(5, 101, 5))

    def __init__(self, enabled, stages):
        self.enabled = enabled
        self.stages = stages
        self.stars = 0
        self.total = 0

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
        """A bar for ``total`` units of work; none when the total is unknown (0)."""
        self.total = max(int(total), 0)
        self.stars = 0
        if self.enabled and self.total:
            sys.stderr.write(self.RULER + "\n")
            sys.stderr.flush()

    def update(self, done):
        if not self.enabled or not self.total:
            return
        want = min(100, int(100 * done / self.total))
        if want > self.stars:
            sys.stderr.write("*" * (want - self.stars))
            sys.stderr.flush()
            self.stars = want

    def finish(self):
        if self.enabled and self.total:
            self.update(self.total)
            sys.stderr.write("\n")
            sys.stderr.flush()
        self.total = 0

    def passes(self, items, description, total=None):
        """``items``, with a tqdm bar when progress is on and stderr is a terminal."""
        if not (self.enabled and sys.stderr.isatty()):
            return items
        return tqdm(items, desc=description, total=total, unit="part", leave=False)
