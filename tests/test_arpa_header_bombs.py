"""Lines outside the n-gram sections cost memory speed, not a Python call each, and
no memory per line.

A 408 KB .gz of comment lines before \\data\\ took 222 s and 1.65 GB (every comment
was kept), and 1 MB of gzipped blank lines ran for more than 600 s.  Blank lines,
and comments past the first MAX_COMMENTS, are now skipped by the C reader, and
the kept comments are bounded.  Each bomb is read in a subprocess under an
address-space limit and a timeout."""
import gzip

import pytest
from _bounded import ROOT, run_python

import nplm
from nplm.backoff import arpa

TOY_ARPA = ROOT / "examples" / "toy.arpa"
LIMIT_MIB = 1024
TIMEOUT = 120


def _gzip_lines(path, line, count, tail=b""):
    with gzip.open(path, "wb", compresslevel=9) as f:
        block = line * 65536
        for _ in range(count // 65536):
            f.write(block)
        f.write(tail)
    return str(path)


def _read_bounded(path):
    return run_python(f"""
import nplm
from nplm.backoff import arpa
try:
    t = arpa.read_arpa({path!r})
    print("read", len(t.comments), t.order)
except nplm.FormatError as e:
    print("error:", e)
""", memory_mib=LIMIT_MIB, timeout=TIMEOUT)


def test_comment_bomb_without_data(tmp_path):
    path = _gzip_lines(tmp_path / "comments.arpa.gz", b"#\n", 40 << 20)       # 40M lines
    r = _read_bounded(path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "error:" in r.stdout and "no \\data\\ header" in r.stdout
    assert f":{(40 << 20) + 1}:" in r.stdout        # the line number counts every skipped line


def test_blank_line_bomb_before_a_model(tmp_path):
    path = _gzip_lines(tmp_path / "blank.arpa.gz", b"\n", 200 << 20, tail=TOY_ARPA.read_bytes())
    r = _read_bounded(path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("read 0 3"), r.stdout


def test_blank_lines_between_sections_and_after_the_end(tmp_path):
    text = TOY_ARPA.read_text()
    text = text.replace("\n\\2-grams:", "\n" + " \t\r\n" * 100000 + "\\2-grams:")
    text = text + "\n \n" * 100000
    path = tmp_path / "spaced.arpa"
    path.write_text(text)
    got = arpa.read_arpa(str(path))
    want = arpa.read_arpa(str(TOY_ARPA))
    assert got.vocab == want.vocab
    for a, b in zip(got.logprob, want.logprob):
        assert (a == b).all()


def test_comments_are_kept_up_to_the_limit(tmp_path):
    lines = [f"# comment {i}" for i in range(arpa.MAX_COMMENTS + 500)]
    path = tmp_path / "commented.arpa"
    path.write_text("\n".join(lines) + "\n\n" + TOY_ARPA.read_text())
    t = arpa.read_arpa(str(path))
    assert t.comments == [f"comment {i}" for i in range(arpa.MAX_COMMENTS)]


@pytest.mark.parametrize("bad", [b"  # not a comment\n", b"garbage\n"])
def test_what_is_not_blank_or_a_comment_is_still_an_error(tmp_path, bad):
    path = tmp_path / "bad.arpa"
    path.write_bytes(b"\n" * 1000 + b"# fine\n" + bad + TOY_ARPA.read_bytes())
    with pytest.raises(nplm.FormatError) as e:
        arpa.read_arpa(str(path))
    assert e.value.line == 1002
