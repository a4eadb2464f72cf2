"""Helpers shared by the benchmarks: locating data, building the PTB models, timing."""
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PTB = SHARED / "data" / "ptb"
CACHE = Path(os.environ.get("NPLM_BENCH_CACHE", Path.home() / ".cache" / "nplm-bench"))


def kenlm_folders():
    """Where KenLM's own programs may be: $NPLM_KENLM_BIN, the folder of $NPLM_LMPLZ,
    tools/build_kenlm.sh's cache, /opt/kenlm-src/build/bin.  Never PATH: nplm installs
    programs under KenLM's names, and a benchmark must not time nplm against itself."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    version = os.environ.get("NPLM_KENLM_VERSION", "0.3.0")
    folders = [os.environ.get("NPLM_KENLM_BIN"), os.path.dirname(os.environ.get("NPLM_LMPLZ") or ""),
               os.environ.get("NPLM_KENLM_CACHE") and os.path.join(os.environ["NPLM_KENLM_CACHE"], "bin"),
               os.path.join(cache, "nplm", f"kenlm-{version}", "bin"), "/opt/kenlm-src/build/bin"]
    return [f for f in folders if f]


def kenlm_program(name):
    """KenLM's program ``name`` (a compiled executable, not a script), or None."""
    for folder in kenlm_folders():
        path = os.path.join(folder, name)
        if os.access(path, os.X_OK) and os.path.isfile(path):
            with open(path, "rb") as f:
                if f.read(2) != b"#!":
                    return path
    return None


def lmplz_path():
    """KenLM's lmplz, if built (see kenlm_folders)."""
    return kenlm_program("lmplz")


def ptb_train_unk():
    """PTB train with <unk> written as UNK (lmplz refuses <unk>), cached."""
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / "ptb.train.UNK.txt"
    if not out.exists():
        out.write_text((PTB / "ptb.train.txt").read_text().replace("<unk>", "UNK"))
    return out


def ptb_lines(split):
    return (PTB / f"ptb.{split}.txt").read_text().replace("<unk>", "UNK").splitlines()


def kn_arpa(order=5):
    """The PTB train KN model of ``order``: built by lmplz when available (the
    reference), else by nplm.estimate.  Cached."""
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"ptb.o{order}.arpa"
    if out.exists():
        return out
    text = ptb_train_unk()
    lmplz = lmplz_path()
    if lmplz:
        with open(text, "rb") as f, open(str(out) + ".tmp", "wb") as g:
            subprocess.run([lmplz, "-o", str(order), "-S", "1G"], stdin=f, stdout=g,
                           stderr=subprocess.DEVNULL, check=True)
    else:
        import nplm
        nplm.estimate(str(text), order=order, arpa=str(out) + ".tmp")
    os.replace(str(out) + ".tmp", out)
    return out


def best_time(fn, repeat=3):
    """Minimum wall time of ``repeat`` calls (seconds) and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def best_times(fns, repeat=3):
    """Minimum wall time (seconds) of each of ``fns`` over ``repeat`` rounds that call
    them in turn, so that every contender sees the same stretches of a noisy machine."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return best


def rss_mib_of(code):
    """Resident-set growth (MiB) of a fresh interpreter running ``code`` after a
    baseline (imports included in the baseline)."""
    prog = (
        "import resource, sys\n"
        "def rss():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmRSS:'): return int(line.split()[1]) / 1024\n"
        + code +
        "\nprint(after - before)\n")
    res = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, check=True)
    return float(res.stdout.strip().splitlines()[-1])


def _cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def _commit():
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def save_results(path, title, tables, description=""):
    """Save a benchmark's tables for tools/docs_benchmarks.py, with the date, commit,
    CPU and command line that produced them.  ``tables``: a list of dicts with
    ``columns`` (names), ``rows`` (lists of cells) and optionally ``title``, ``notes``."""
    import datetime
    import json
    result = {
        "title": title, "description": description,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(), "cpu": _cpu_name(), "cpus": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 1),
        "command": " ".join(["python", os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "tables": tables,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=1, default=float) + "\n", encoding="utf-8")
