"""Counts as a file: the counts of a corpus's shards, merged, estimate the model of
the whole corpus, byte for byte (and lmplz's, where it has a reference)."""
import lzma
import subprocess
import sys

import pytest

from nplm.backoff.estimate import estimate
from nplm.backoff.estimate.counts import ShardCounts, count_to_file, merge_files
from nplm.errors import FormatError

from helpers import REFERENCE, ROOT, need_reference


def shards(tmp_path, name, cuts):
    """The text cut into shards at the given fractions of its lines."""
    lines = (REFERENCE / name).read_bytes().splitlines(keepends=True)
    bounds = [0] + [int(c * len(lines)) for c in cuts] + [len(lines)]
    paths = []
    for i in range(len(bounds) - 1):
        path = tmp_path / f"shard{i}.txt"
        path.write_bytes(b"".join(lines[bounds[i]:bounds[i + 1]]))
        paths.append(path)
    return paths


@pytest.mark.parametrize("name,text,order,options", [
    ("ptb5k.o5", "ptb5k.txt", 5, {}),
    ("ptb5k.o4.prune011", "ptb5k.txt", 4, {"prune": [0, 1, 1]}),
    ("wiki3k.o5", "wiki3k.txt", 5, {}),
])
def test_shard_counts_estimate_the_whole_corpus(name, text, order, options, tmp_path):
    need_reference()
    counted = []
    for i, shard in enumerate(shards(tmp_path, text, [0.15, 0.5])):
        out = tmp_path / f"shard{i}.counts"
        # the middle shard is counted within a tiny budget (spilled runs, merged)
        count_to_file(shard, order, out, progress=False, memory="64K" if i == 1 else None,
                      temp_prefix=tmp_path)
        counted.append(out)
    with lzma.open(REFERENCE / f"{name}.arpa.xz", "rb") as f:
        reference = f.read()
    model = tmp_path / "model.arpa"
    estimate(None, order, arpa=model, counts=counted, progress=False, temp_prefix=tmp_path, **options)
    assert model.read_bytes() == reference
    merge_files(counted, tmp_path / "all.counts")
    whole = tmp_path / "whole.counts"
    count_to_file(REFERENCE / text, order, whole, progress=False)
    merged, direct = ShardCounts.load(tmp_path / "all.counts"), ShardCounts.load(whole)
    assert merged.vocab == direct.vocab and merged.stats == direct.stats
    assert (merged.keys == direct.keys).all() and (merged.counts == direct.counts).all()
    estimate(None, order, arpa=model, counts=[tmp_path / "all.counts"], progress=False,
             memory="256K", temp_prefix=tmp_path, **options)
    assert model.read_bytes() == reference
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("nplm-")]


def test_cli_count_merge_estimate(tmp_path):
    need_reference()
    a, b = shards(tmp_path, "tiny200.txt", [0.6])
    run = [sys.executable, "-m", "nplm"]
    for src in (a, b):
        subprocess.run(run + ["count", "-o", "4", "--text", str(src), "--output", f"{src}.counts", "-q"],
                       cwd=ROOT, check=True)
    subprocess.run(run + ["count", "--merge", f"{a}.counts", f"{b}.counts", "--output",
                          str(tmp_path / "m.counts"), "-q"], cwd=ROOT, check=True)
    out = subprocess.run(run + ["estimate", "-o", "4", "--counts", str(tmp_path / "m.counts"),
                                "--discount_fallback", "-q"], cwd=ROOT, check=True, capture_output=True).stdout
    with lzma.open(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz", "rb") as f:
        assert out == f.read()


def test_counts_of_other_orders_or_files_are_refused(tmp_path):
    need_reference()
    count_to_file(REFERENCE / "tiny200.txt", 3, tmp_path / "a.counts", progress=False)
    with pytest.raises(ValueError, match="order 3"):
        estimate(None, 4, counts=[tmp_path / "a.counts"], progress=False, temp_prefix=tmp_path)
    (tmp_path / "bad.counts").write_bytes(b"not counts at all")
    with pytest.raises(FormatError):
        estimate(None, 3, counts=[tmp_path / "bad.counts"], progress=False, temp_prefix=tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("nplm-")]
