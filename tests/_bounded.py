"""Running a piece of Python in a subprocess under time and memory limits, for tests
of hostile inputs: a hang fails the test (TimeoutExpired) instead of stalling the run,
a crash shows as a signal in the return code, and an address-space limit
(RLIMIT_AS) turns unbounded memory use into a failure instead of swapping."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_python(code, *, memory_mib=None, timeout=120, stdin=None, env=None):
    """``code`` run by this Python from the repository root; returns the
    CompletedProcess (text output).  ``memory_mib``: RLIMIT_AS for the child."""
    pre = ""
    if memory_mib is not None:
        pre = ("import resource\n"
               f"resource.setrlimit(resource.RLIMIT_AS, ({memory_mib} << 20, {memory_mib} << 20))\n")
    child_env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    child_env.update(env or {})
    return subprocess.run([sys.executable, "-c", pre + code], cwd=ROOT, env=child_env, stdin=stdin,
                          capture_output=True, text=True, timeout=timeout)
