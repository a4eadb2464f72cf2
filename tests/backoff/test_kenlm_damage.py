"""KenLM binaries holding values no model can: refused, never scored.

KenLM's format has no checksums; a damaged file scored NaN, positive or 10^35 log10
probabilities.  A load that reads the whole file (the default, READ) checks every
record; a LAZY load checks the unigrams and refuses an absurd score on first use."""
import re
import struct

import numpy as np
import pytest

import nplm
from nplm.backoff.kenlm import format as fmt

from helpers import ROOT, quiet_config

TOY_ARPA = str(ROOT / "examples" / "toy.arpa")
SENTENCE = "the cat sat on the mat"


def _built(tmp_path, kind):
    path = tmp_path / f"m.{kind}"
    nplm.build_binary(TOY_ARPA, str(path), kind, messages=None)
    raw = bytearray(path.read_bytes())
    header = fmt.parse_header(bytes(raw[:4096]), len(raw))
    return path, raw, fmt.layout(header, lambda o, n: bytes(raw[o:o + n]))


def _load(path, method):
    config = quiet_config()
    config.load_method = getattr(nplm.LoadMethod, method)
    return nplm.Model(str(path), config)


@pytest.mark.parametrize("method", ["LAZY", "POPULATE_OR_READ", "READ"])
@pytest.mark.parametrize("kind", ["probing", "trie"])
def test_a_nan_unigram_back_off_is_refused_at_load(tmp_path, kind, method):
    path, raw, layout = _built(tmp_path, kind)
    struct.pack_into("<f", raw, layout.unigram.offset + 3 * layout.unigram.entry + 4, float("nan"))
    path.write_bytes(bytes(raw))
    with pytest.raises(nplm.ModelLoadError, match=r"corrupt KenLM binary: a back-off no model holds in its "
                                                  r"unigrams \(record 3\)"):
        _load(path, method)


def test_trie_records_out_of_order_are_refused_at_load_and_by_verify(tmp_path):
    from nplm.verify import verify
    path, raw, layout = _built(tmp_path, "trie")
    middle = layout.middle[0]
    raw[middle.base + 8:middle.base + 40] = raw[middle.base + 40:middle.base + 72]
    path.write_bytes(bytes(raw))
    for method in ("POPULATE_OR_READ", "READ"):
        with pytest.raises(nplm.ModelLoadError, match=r"corrupt KenLM binary: .* in its 2-grams"):
            _load(path, method)
    with pytest.raises(nplm.FormatError, match="corrupt KenLM binary"):
        verify(str(path))


@pytest.mark.parametrize("value", [float("nan"), 1e30])
def test_a_lazy_load_refuses_an_absurd_score_on_first_use(tmp_path, value):
    path, raw, layout = _built(tmp_path, "probing")
    longest = layout.longest
    entries = np.frombuffer(bytes(raw[longest.offset:longest.end]), np.uint8).reshape(-1, longest.entry)
    for i in np.flatnonzero(entries[:, :8].copy().view(np.uint64).ravel()):
        struct.pack_into("<f", raw, longest.offset + int(i) * longest.entry + 8, value)
    path.write_bytes(bytes(raw))
    with pytest.raises(nplm.ModelLoadError, match="a probability no model holds in its 3-grams"):
        _load(path, "POPULATE_OR_READ")
    model = _load(path, "LAZY")
    model.score("zebra", bos=False, eos=False)      # a unigram: sound
    with pytest.raises(nplm.FormatError, match=re.escape(f"corrupt KenLM binary: a log10 probability of {value:g}")):
        model.score(SENTENCE)
