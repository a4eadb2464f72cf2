"""Kneser-Ney estimation within a memory budget: counts spilled as sorted runs to a
temporary folder and the model estimated part by part must give lmplz's ARPA byte
for byte, and leave no temporary file behind, whichever way the run ends."""
import lzma
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nplm.backoff import _kn, _kn_merge
from nplm.backoff.estimate import DiscountError, estimate, parse_size
from nplm.backoff.estimate.partitioned import plan_parts

from helpers import LMPLZ_CASES as CASES
from helpers import REFERENCE, ROOT, need_reference


def leftovers(folder):
    return sorted(p.name for p in Path(folder).iterdir() if p.name.startswith("nplm-"))


@pytest.mark.parametrize("memory", ["64K", "1M"])
@pytest.mark.parametrize("name,text,order,options", CASES, ids=[c[0] for c in CASES])
def test_spilled_estimate_is_lmplz_bytes(name, text, order, options, memory, tmp_path, capsys):
    need_reference()
    temp = tmp_path / "temp"
    temp.mkdir()
    out = tmp_path / "model.arpa"
    estimate(REFERENCE / text, order, arpa=out, memory=memory, temp_prefix=temp, **options)
    err = capsys.readouterr().err
    assert " parts of about " in err          # it did spill and run part by part
    with lzma.open(REFERENCE / f"{name}.arpa.xz", "rb") as f:
        assert out.read_bytes() == f.read()
    assert leftovers(temp) == []


def generated_corpus(path, lines, vocab, seed):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    weights = [1.0 / (i + 1) for i in range(vocab)]      # Zipf-like, so counts vary
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(lines):
            n = rng.randint(1, 25)
            f.write(" ".join(rng.choices(words, weights, k=n)) + "\n")


@pytest.mark.parametrize("order,vocab,options", [(3, 50, {}), (5, 2000, {}), (4, 500, {"prune": [0, 0, 1]}),
                                                 (6, 300, {"interpolate_unigrams": False})])
def test_spilled_equals_in_memory_on_generated_text(order, vocab, options, tmp_path):
    text = tmp_path / "corpus.txt"
    generated_corpus(text, 4000, vocab, seed=order * vocab)
    whole, spilled = tmp_path / "whole.arpa", tmp_path / "spilled.arpa"
    options = dict(options, discount_fallback=True)     # small vocabularies lack count-1 words
    estimate(text, order, arpa=whole, progress=False, **options)
    for memory in ("64K", "256K"):
        estimate(text, order, arpa=spilled, progress=False, memory=memory, temp_prefix=tmp_path, **options)
        assert spilled.read_bytes() == whole.read_bytes()
    assert leftovers(tmp_path) == []


def test_several_inputs_and_compressed_glob(tmp_path):
    """Several files (one compressed) read in turn are the concatenated text."""
    need_reference()
    lines = (REFERENCE / "ptb5k.txt").read_bytes().splitlines(keepends=True)
    (tmp_path / "a.txt").write_bytes(b"".join(lines[:2000]))
    with lzma.open(tmp_path / "b.txt.xz", "wb") as f:
        f.write(b"".join(lines[2000:]))
    out = tmp_path / "m.arpa"
    estimate([tmp_path / "a.txt", str(tmp_path / "b.txt*")], 3, arpa=out, progress=False,
             memory="128K", temp_prefix=tmp_path)
    with lzma.open(REFERENCE / "ptb5k.o3.arpa.xz", "rb") as f:
        assert out.read_bytes() == f.read()


def test_failure_after_spilling_leaves_nothing(tmp_path):
    """A small vocabulary has no word of adjusted count 1, so the discounts fail,
    which is found only after the runs were written and merged."""
    text = tmp_path / "corpus.txt"
    generated_corpus(text, 3000, 50, seed=1)
    with pytest.raises(DiscountError):
        estimate(text, 4, arpa=tmp_path / "m.arpa", progress=False, memory="64K", temp_prefix=tmp_path)
    assert leftovers(tmp_path) == []
    assert not (tmp_path / "m.arpa").exists()


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, None), (signal.SIGTERM, 128 + signal.SIGTERM),
                                          (signal.SIGHUP, 128 + signal.SIGHUP)], ids=["INT", "TERM", "HUP"])
def test_a_signal_while_spilling_leaves_nothing(tmp_path, signum, code):
    """Ctrl-C, and SIGTERM / SIGHUP (kill, timeout, Slurm, a closed terminal) alike:
    the spill folder and the output's temporary file removed, 128 + signal for the
    two others."""
    text = tmp_path / "corpus.txt"
    generated_corpus(text, 200000, 5000, seed=7)        # (long enough to be running when signalled)
    cmd = [sys.executable, "-m", "nplm", "estimate", "-o", "5", "--text", str(text), "--arpa",
           str(tmp_path / "m.arpa"), "-S", "64K", "-T", str(tmp_path), "-q", "--discount_fallback"]
    # (SIGHUP at its default in the child: a run under nohup would pass its "ignore" on,
    # which nplm rightly keeps)
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    deadline = time.time() + 60
    while not leftovers(tmp_path) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it spilled"
    time.sleep(0.3)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and (code is None or proc.returncode == code), err
    assert b"Traceback" not in err
    assert leftovers(tmp_path) == []
    assert not (tmp_path / "m.arpa").exists()


def test_full_disk_names_the_folder(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    import numpy as np

    from nplm.io.atomic import temp_folder
    with temp_folder(tmp_path) as folder:
        os.symlink("/dev/full", folder.file("x.npy"))
        with pytest.raises(OSError, match=str(tmp_path)):
            folder.save("x", np.zeros(1 << 16))
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("text,value", [("1G", 1 << 30), ("64K", 64 << 10), ("512", 512 << 10),
                                        ("2.5M", int(2.5 * (1 << 20))), ("100b", 100)])
def test_parse_size_like_lmplz(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["", "G", "-1G", "1X", "0"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_parse_size_percent_of_physical_memory():
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert abs(parse_size("50%") - total // 2) <= 1


def test_parts_cover_every_word_and_are_never_empty():
    import numpy as np
    rng = np.random.default_rng(0)
    hist = rng.integers(0, 5, size=1000) * (rng.random(1000) < 0.3)
    for target in (1, 7, 50, 10 ** 6):
        plan = plan_parts(hist, 1000, target)
        b = plan.bounds
        assert b[0] == 0 and b[-1] == 1000 and (np.diff(b) > 0).all()
        rows = [int(hist[b[i]:b[i + 1]].sum()) for i in range(len(b) - 1)]
        assert all(r > 0 for r in rows)


def test_routing_is_a_stable_sort_by_part():
    import numpy as np
    rng = np.random.default_rng(1)
    for parts in (1, 3, 64):
        target = rng.integers(0, parts, size=5000).astype(np.int32)
        pos, starts = _kn_merge.bucket_positions(target, parts)
        order = np.empty_like(pos)
        order[pos] = np.arange(len(pos))
        assert (order == np.argsort(target, kind="stable")).all()
        assert (np.diff(starts) == np.bincount(target, minlength=parts)).all()
    with pytest.raises(ValueError):
        _kn_merge.bucket_positions(np.array([0, 2], dtype=np.int32), 2)


def test_context_sums_by_trie_against_brute_force():
    """Trigram records find their bigram contexts by the suffix trie (node = the
    context's last word, first = its first word) and sum like a dict would."""
    import numpy as np
    rng = np.random.default_rng(2)
    lo, words = 10, 30                       # the part holds words 10..29
    bigrams = sorted({(int(v), int(x)) for v, x in rng.integers(0, 40, size=(300, 2)) if lo <= x < lo + words},
                     key=lambda g: (g[1], g[0]))     # suffix order
    lower = np.array(bigrams, dtype=np.int32)
    child = _kn.child_begin(np.ascontiguousarray(lower[:, 1] - lo), words)
    pick = rng.integers(0, len(bigrams), size=2000)
    node, first = lower[pick, 1] - lo, lower[pick, 0]
    adj = rng.integers(1, 6, size=2000).astype(np.uint64)
    mark = (rng.random(2000) < 0.2).astype(np.uint8)
    sums = np.zeros((len(bigrams), 5), np.uint64)
    where = np.empty(2000, dtype=np.int32)
    missing = _kn_merge.context_stats(node.astype(np.int32), first.astype(np.int32), adj, mark, lower, child, lo,
                                      False, True, sums, where)
    assert missing == 0 and (where == pick).all()
    for row in range(len(bigrams)):
        sel = pick == row
        kept = adj[sel & (mark == 0)]
        assert list(sums[row]) == [adj[sel].sum(), (kept == 1).sum(), (kept == 2).sum(), (kept >= 3).sum(),
                                   adj[sel & (mark == 1)].sum()]
    absent = np.array([words + 5], dtype=np.int32)      # a node outside the part
    assert _kn_merge.context_stats(absent, absent, adj[:1], mark[:1], lower, child, lo, False, True,
                                   sums, where[:1]) == 1


def test_a_full_spill_folder_names_what_counting_needs(tmp_path):
    """-T on a 3 MiB file system (a tmpfs in a mount namespace of the test's own):
    the error projects what counting the whole text spills, far beyond the one write
    that failed, and the folder is left empty."""
    text = tmp_path / "corpus.txt"
    generated_corpus(text, 60000, 5000, seed=3)
    small = tmp_path / "small"
    small.mkdir()
    script = (f"mount -t tmpfs -o size=3M tmpfs {small} && {sys.executable} -m nplm estimate -o 5 -S 1M "
              f"-T {small} --text {text} --arpa {tmp_path / 'm.arpa'} --quiet; echo rc=$?; ls -A {small}")
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.stdout.split() == ["rc=1"], (r.stdout, r.stderr)
    m = re.search(r"no space left for temporary files in .*: ([\d.]+) MiB of this run's files there, "
                  r"[\d.]+ MiB free; counting the whole text spills about ([\d,.]+) MiB \(projected from the "
                  r"(\d+)% read\)", r.stderr)
    assert m, r.stderr
    held, projected, share = float(m[1]), float(m[2].replace(",", "")), int(m[3])
    assert 2 < held <= 3 and projected > 3 and 0 < share < 100
    assert not (tmp_path / "m.arpa").exists()


SAMPLED = """
import sys, threading, time
from nplm.backoff.estimate import estimate

def spill_resident():
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if not line[0].isupper():
                inside = sys.argv[3] in line and "/run" in line     # the spilled runs
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total

peak, done = [0], threading.Event()

def sample():
    while not done.is_set():
        peak[0] = max(peak[0], spill_resident())
        time.sleep(0.01)

threading.Thread(target=sample, daemon=True).start()
estimate(sys.argv[1], 5, arpa=sys.argv[2], memory="1M", temp_prefix=sys.argv[3], progress=False,
         discount_fallback=True)
done.set()
print(peak[0])
"""


def test_many_spilled_runs_stay_out_of_resident_memory(tmp_path):
    """Hundreds of runs: each part reads a short segment of every run, and the pages
    a fault maps around a segment (64 KiB per run and array) are dropped again, so the
    spill files' resident pages stay far below what hundreds of runs would pin."""
    text = tmp_path / "corpus.txt"
    generated_corpus(text, 120000, 20000, seed=5)
    spill = tmp_path / "spill"
    spill.mkdir()
    r = subprocess.run([sys.executable, "-c", SAMPLED, str(text), str(tmp_path / "m.arpa"), str(spill)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    runs_pinned = int(r.stdout.split()[-1])
    assert runs_pinned < 12 << 20, runs_pinned      # (28 MiB when every run kept its pages)
    reference = tmp_path / "in-memory.arpa"
    estimate(text, 5, arpa=reference, progress=False, discount_fallback=True)
    assert (tmp_path / "m.arpa").read_bytes() == reference.read_bytes()


PEAK = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, capture_output=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def _peak(text, arpa, folder):
    r = subprocess.run([sys.executable, "-c", PEAK, sys.executable, "-m", "nplm", "estimate", "-o", "4", "-S", "2M",
                        "-T", str(folder), "--discount_fallback", "--text", str(text), "--arpa", str(arpa),
                        "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return int(r.stdout.split()[-1])


def test_one_enormous_line_is_counted_within_the_budget(tmp_path):
    """The same words as one line (3 MB) and as lines of 20 words, under -S 2M: the one
    line is counted in pieces that carry its last words over, so it costs less than its
    own size more than the short lines (it cost 15 times its size: the whole line's
    n-grams were counted before any could spill), and gives the same n-grams as one
    piece does in memory."""
    text = tmp_path / "corpus.txt"
    generated_corpus(text, 60000, 3000, seed=7)
    words = text.read_text().split()
    one, many = tmp_path / "one.txt", tmp_path / "many.txt"
    one.write_text(" ".join(words) + "\n")
    many.write_text("\n".join(" ".join(words[i:i + 20]) for i in range(0, len(words), 20)) + "\n")
    extra = _peak(one, tmp_path / "one.arpa", tmp_path) - _peak(many, tmp_path / "many.arpa", tmp_path)
    assert extra < one.stat().st_size, (extra, one.stat().st_size)
    whole = tmp_path / "whole.arpa"
    estimate(one, 4, arpa=whole, progress=False, discount_fallback=True)
    assert (tmp_path / "one.arpa").read_bytes() == whole.read_bytes()
