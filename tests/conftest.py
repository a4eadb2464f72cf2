"""Shared fixtures; the plain helpers they use live in helpers.py."""
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
