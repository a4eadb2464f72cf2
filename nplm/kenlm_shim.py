"""``import kenlm`` gives nplm in every process of an environment: a one-line ``kenlm``
module and a ``kenlm`` distribution record (``*.dist-info``) written into a
site-packages folder, so that new processes (spawn and forkserver workers,
subprocesses) import nplm as kenlm and ``importlib.metadata`` checks for a kenlm
distribution pass.  The record is a real one: pip lists it, and ``pip uninstall kenlm``
removes exactly its files (its RECORD names them).  A real kenlm in the same folder is
never replaced silently: ``install`` refuses, and with ``force`` moves its files into a
backup folder that ``remove`` puts back."""

import base64
import hashlib
import os
import shutil
import sysconfig

import nplm

# The kenlm module's API version that nplm follows, with nplm's own as the local part
# (PEP 440), so that a version check sees both: 0.3.0+nplm.0.1.0.
KENLM_API_VERSION = "0.3.0"
VERSION = f"{KENLM_API_VERSION}+nplm.{nplm.__version__}"
INSTALLER = "nplm kenlm-shim"
BACKUP = ".nplm-kenlm-backup"
MODULE = '''"""kenlm's Python API, provided by nplm (written by `nplm kenlm-shim install`; undo
with `nplm kenlm-shim remove` or `pip uninstall kenlm`)."""
import nplm

nplm.install_as_kenlm()     # this module's name now refers to nplm itself
'''


def site_folder(target=None):
    """Where the shim goes: ``target``, else this interpreter's site-packages."""
    return os.path.abspath(target or sysconfig.get_paths()["purelib"])


def _kenlm_entries(folder):
    """The names in ``folder`` that belong to a kenlm module or distribution."""
    names = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
        stem = name.split(".", 1)[0]
        if stem == "kenlm" or name.startswith("kenlm-") and name.endswith((".dist-info", ".egg-info")):
            names.append(name)
    return names


def _ours(folder, names):
    return any(n.endswith(".dist-info") and _installer(os.path.join(folder, n)) == INSTALLER for n in names)


def _installer(dist_info):
    try:
        with open(os.path.join(dist_info, "INSTALLER")) as f:
            return f.read().strip()
    except OSError:
        return None


def status(target=None):
    """A line saying what ``import kenlm`` finds in the folder."""
    folder = site_folder(target)
    names = _kenlm_entries(folder)
    backup = " (a real kenlm is kept aside in " + BACKUP + ")" if os.path.isdir(os.path.join(folder, BACKUP)) else ""
    if not names:
        return f"{folder}: no kenlm{backup}"
    if _ours(folder, names):
        return f"{folder}: kenlm {VERSION} is nplm's shim{backup}"
    return f"{folder}: a real kenlm ({', '.join(names)})"


def install(target=None, force=False):
    """Write the shim into the folder; returns the status line.  A real kenlm there is
    refused unless ``force``, which moves it into the backup folder first."""
    folder = site_folder(target)
    os.makedirs(folder, exist_ok=True)
    names = _kenlm_entries(folder)
    if names and not _ours(folder, names):
        if not force:
            raise FileExistsError(f"{folder} holds a real kenlm ({', '.join(names)}): uninstall it first "
                                  "(pip uninstall kenlm), or add --force to keep it aside until "
                                  "`nplm kenlm-shim remove` puts it back")
        backup = os.path.join(folder, BACKUP)
        os.makedirs(backup, exist_ok=True)
        for name in names:
            os.replace(os.path.join(folder, name), os.path.join(backup, name))
    elif names:
        _remove_files(folder)
    _write(folder)
    return status(target)


def _write(folder):
    dist = os.path.join(folder, f"kenlm-{VERSION}.dist-info")
    os.makedirs(dist, exist_ok=True)
    files = {
        "kenlm.py": MODULE,
        f"{os.path.basename(dist)}/METADATA": (
            f"Metadata-Version: 2.1\nName: kenlm\nVersion: {VERSION}\n"
            "Summary: kenlm's Python API provided by nplm (nplm kenlm-shim)\n"
            f"Requires-Dist: nplm>={nplm.__version__}\n"),
        f"{os.path.basename(dist)}/INSTALLER": INSTALLER + "\n",
        f"{os.path.basename(dist)}/top_level.txt": "kenlm\n",
    }
    record = []
    for rel, text in files.items():
        data = text.encode()
        with open(os.path.join(folder, rel), "wb") as f:
            f.write(data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{rel},sha256={digest},{len(data)}")
    record.append(f"{os.path.basename(dist)}/RECORD,,")
    with open(os.path.join(dist, "RECORD"), "w") as f:
        f.write("\n".join(record) + "\n")


def _remove_files(folder):
    for name in _kenlm_entries(folder):
        path = os.path.join(folder, name)
        shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
    cache = os.path.join(folder, "__pycache__")
    for name in os.listdir(cache) if os.path.isdir(cache) else ():
        if name.startswith("kenlm."):
            os.unlink(os.path.join(cache, name))


def remove(target=None):
    """Remove the shim and put back a real kenlm that ``install(force=True)`` kept
    aside; returns the status line.  A real kenlm (not the shim) is left alone."""
    folder = site_folder(target)
    names = _kenlm_entries(folder)
    if names and not _ours(folder, names):
        raise FileExistsError(f"{folder} holds a real kenlm, not nplm's shim: nothing to remove")
    _remove_files(folder)
    backup = os.path.join(folder, BACKUP)
    if os.path.isdir(backup):
        for name in os.listdir(backup):
            os.replace(os.path.join(backup, name), os.path.join(folder, name))
        os.rmdir(backup)
    return status(target)
