"""A KenLM binary loaded with LoadMethod.READ holds everything it will read, its words
included: replacing, truncating or removing the file afterwards changes no answer.
And bytes appended to a KenLM binary are never read: the words end where the
vocabulary's last string ends."""
import os
import subprocess
import sys

import pytest

import nplm

from helpers import ROOT, arpa_text, kenlm_program

ARPA = str(ROOT / "examples" / "toy.arpa")


def _built(tmp_path, kind):
    path = str(tmp_path / f"m.{kind}")
    subprocess.run([kenlm_program("build_binary"), kind, ARPA, path], check=True, capture_output=True)
    return path


def _answers(model):
    state, out = nplm.State(), nplm.State()
    model.BeginSentenceWrite(state)
    return (model.vocab.words(), model.vocab.word(5), model.vocab.id("cat"), model.score("the cat sat on the mat"),
            list(model.full_scores("a dog on the log")), model.BaseScore(state, "the", out))


@pytest.mark.parametrize("kind", ["probing", "trie"])
@pytest.mark.parametrize("change", ["replace", "truncate", "unlink"])
def test_read_keeps_answering_after_the_file_changes(tmp_path, kind, change):
    path = _built(tmp_path, kind)
    config = nplm.Config()
    config.load_method = nplm.LoadMethod.READ
    config.show_progress = False
    model = nplm.Model(path, config)
    before = _answers(model)
    if change == "replace":
        other = tmp_path / "other.arpa"
        other.write_text(arpa_text(["-1\t<unk>\t0", "0\t<s>\t-0.5", "-0.5\t</s>\t0", "-0.7\tzz\t-0.2"],
                                   ["-0.3\t<s> zz", "-0.2\tzz </s>"]))
        nplm.build_binary(str(other), str(tmp_path / "other.bin"), kind, messages=None)
        os.replace(tmp_path / "other.bin", path)
    elif change == "truncate":
        os.truncate(path, 100)
    else:
        os.unlink(path)
    assert _answers(model) == before


def test_appended_bytes_are_not_read(tmp_path):
    path = _built(tmp_path, "probing")
    words = nplm.Model(path).vocab.words()
    with open(path, "ab") as f:
        for _ in range(200):
            f.write(b"\x01" * (1 << 20))
    # VmHWM: this process's peak (ru_maxrss would carry the parent's over exec)
    code = ("import nplm, sys; m = nplm.Model(sys.argv[1]); w = m.vocab.words(); "
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]; "
            "print(len(w), hwm.split()[1])")
    out = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, check=True, cwd=ROOT)
    count, rss_kb = map(int, out.stdout.split())
    assert count == len(words)
    assert rss_kb < 150 * 1024, f"{rss_kb} KB: the appended 200 MB were read"
