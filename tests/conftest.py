"""Shared fixtures; the plain helpers they use live in helpers.py."""
import faulthandler

import pytest

import nplm

from helpers import REFERENCE, SHARED, need_shared


@pytest.fixture(scope="session")
def shared():
    need_shared()
    return SHARED


@pytest.fixture(scope="session")
def reference_binaries(tmp_path_factory):
    """nplm binaries of three reference ARPAs (they load in milliseconds): name -> path."""
    need_shared()
    tmp = tmp_path_factory.mktemp("bin")
    out = {}
    for name in ("ptb5k.o3", "ptb5k.o5", "wiki3k.o5"):
        out[name] = str(tmp / f"{name}.nplm")
        nplm.build_binary(str(REFERENCE / f"{name}.arpa.xz"), out[name])
    return out


# Modules whose tests take tens of seconds each (the durations of a full run); with
# -m "not slow" a developer runs the rest in a few minutes.
SLOW_MODULES = {"test_fuzz", "test_reproduce", "test_interrupt", "test_doc_examples", "test_docs_build",
                "test_estimate_dask", "test_estimate_spill", "test_kenlm_clients", "test_fork_safety",
                "test_address_space_limits", "test_arpa_header_bombs", "test_train", "test_progress_output"}
# Names that mean a test module reads ../shared.
SHARED_NAMES = ("REFERENCE", "DATA", "SHARED", "need_shared", "reference_binaries")


# The slowest tests take a minute or two (pytest prints the slowest at the end); one
# that runs for this long is stuck (a pipe never closed, a lock never released): its
# threads' stacks go to stderr and the run ends, failed, rather than waiting for CI's
# limit with nothing to show.  (test_fuzz arms a shorter watchdog of its own.)
STUCK_AFTER_S = 900


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    faulthandler.dump_traceback_later(STUCK_AFTER_S, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_collection_modifyitems(config, items):
    """Mark tests ``slow`` by module and ``needs_shared`` where their module names
    ../shared, so that ``-m "not slow"`` and ``-m "not needs_shared"`` select."""
    sources = {}
    for item in items:
        path = item.path
        if path not in sources:
            sources[path] = path.read_text(errors="replace") if path.suffix == ".py" else ""
        if path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        if any(name in sources[path] for name in SHARED_NAMES):
            item.add_marker(pytest.mark.needs_shared)
