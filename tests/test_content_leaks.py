"""Error messages never quote a file the user did not name.

A spec may name any path, and the ARPA reader's "first non-empty line was '...'"
quoted the file's first 60 characters: a spec naming /etc/shadow printed its first
line.  Files reached through a spec are read with content_hidden(): their errors
give the size of a bad line, not its text.  A file the user names directly keeps
the quote (it helps to see what the file is)."""
import json

import pytest
from _bounded import ROOT

import nplm
from nplm.errors import content_hidden, quoted

from helpers import quiet_config

TOY_ARPA = str(ROOT / "examples" / "toy.arpa")
SECRET = "root:$6$SECRETHASH:19000:0:99999:7:::"



@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "shadow"
    path.write_text(SECRET + "\ndaemon:*:19000:0:99999:7:::\n")
    return path


def _spec(tmp_path, models):
    path = tmp_path / "mix.json"
    path.write_text(json.dumps({"nplm": "interpolation", "version": 1, "mode": "linear",
                                "models": models, "weights": [1 / len(models)] * len(models)}))
    return str(path)


def _all_messages(e):
    out = []
    while e is not None:
        out.append(str(e))
        e = e.__cause__ or e.__context__
    return "\n".join(out)


@pytest.mark.parametrize("layout", ["alone", "second", "nested"])
def test_a_file_named_by_a_spec_is_not_quoted(tmp_path, secret, layout):
    if layout == "alone":
        spec = _spec(tmp_path, [str(secret)])
    elif layout == "second":
        spec = _spec(tmp_path, [TOY_ARPA, str(secret)])
    else:
        inner = tmp_path / "inner"
        inner.mkdir()
        spec_inner = _spec(inner, [str(secret)])
        spec = _spec(tmp_path, [TOY_ARPA, spec_inner])
    with pytest.raises(nplm.ModelLoadError) as e:
        nplm.Model(spec, quiet_config())
    text = _all_messages(e.value)
    assert "SECRETHASH" not in text and "root:" not in text, text
    assert str(secret) in text                   # the path is named, the content is not
    assert "not shown" in text


def test_a_file_named_directly_is_quoted(secret):
    with pytest.raises(nplm.ModelLoadError, match="SECRETHASH"):
        nplm.Model(str(secret), quiet_config())


def test_bad_ngram_lines_through_a_spec_are_not_quoted(tmp_path):
    lines = open(TOY_ARPA, encoding="utf-8").read().split("\n")
    i = next(k for k, line in enumerate(lines) if line.startswith("\\2-grams:")) + 1
    lines[i] = "-0.5\tPRIVATEWORD1 PRIVATEWORD2 PRIVATEWORD3"
    bad = tmp_path / "bad.arpa"
    bad.write_text("\n".join(lines))
    with pytest.raises(nplm.ModelLoadError) as direct:
        nplm.Model(str(bad), quiet_config())
    assert "PRIVATEWORD" in str(direct.value)
    with pytest.raises(nplm.ModelLoadError) as through:
        nplm.Model(_spec(tmp_path, [str(bad)]), quiet_config())
    assert "PRIVATEWORD" not in _all_messages(through.value)


def test_quoting_is_restored_after_the_block():
    assert "abc" in quoted(b"abc")
    with content_hidden():
        assert "abc" not in quoted(b"abc") and "3 bytes" in quoted(b"abc")
    assert "abc" in quoted(b"abc")
