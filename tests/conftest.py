"""Shared test fixtures: where ../shared lives, and the texts the references use."""
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
REFERENCE = SHARED / "reference"
DATA = SHARED / "data"


def need_shared():
    if not SHARED.is_dir():
        pytest.skip("../shared (reference ARPAs and corpora) is absent")


@pytest.fixture(scope="session")
def shared():
    need_shared()
    return SHARED


def read_lines(path, unk_to="UNK", limit=None):
    """Lines of a corpus, with <unk> written as the references' UNK."""
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    if limit is not None:
        lines = lines[:limit]
    if unk_to is not None:
        lines = [line.replace("<unk>", unk_to) for line in lines]
    return lines


@pytest.fixture(scope="session")
def reference_binaries(tmp_path_factory):
    """nplm binaries of three reference ARPAs (they load in milliseconds): name -> path."""
    need_shared()
    import nplm
    tmp = tmp_path_factory.mktemp("bin")
    out = {}
    for name in ("ptb5k.o3", "ptb5k.o5", "wiki3k.o5"):
        out[name] = str(tmp / f"{name}.nplm")
        nplm.build_binary(str(REFERENCE / f"{name}.arpa.xz"), out[name])
    return out


def quiet_config():
    """An nplm.Config that prints nothing while loading."""
    import nplm
    cfg = nplm.Config()
    cfg.show_progress = False
    cfg.arpa_complain = nplm.ARPALoadComplain.NONE
    return cfg
