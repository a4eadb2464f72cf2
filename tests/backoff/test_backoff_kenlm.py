"""nplm's back-off engine against the real kenlm module, on every lmplz reference.

Every token's log10 probability, n-gram length and OOV flag; sentence scores and
perplexities; state chains and which states compare equal; binary == ARPA."""
import itertools
import math
import random

import kenlm
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nplm

from helpers import DATA, REFERENCE, arpa_text, need_shared, quiet_config, random_arpa, read_lines, srilm_variants

ARPAS = sorted(p.name for p in REFERENCE.glob("*.arpa.xz")) if REFERENCE.is_dir() else []
TEXTS = ["ptb5k.txt", "wiki3k.txt", "tiny200.txt"]



@pytest.fixture(scope="module")
def texts():
    need_shared()
    lines = []
    for name in TEXTS:
        lines += read_lines(REFERENCE / name)
    lines += read_lines(DATA / "ptb" / "ptb.valid.txt")
    # Sentences with words no model knows, explicit markers and odd spacing.
    lines += ["zzqx unknownword the", "</s> the </s>", "<s> the cat", "  the\tcat \x0b sat\r ",
              "", "<unk> UNK <UNK>", "the the the the the the the the the the"]
    return lines


@pytest.fixture(scope="module", params=ARPAS)
def pair(request, tmp_path_factory):
    need_shared()
    path = str(REFERENCE / request.param)
    km = kenlm.Model(path, quiet_config(kenlm))
    nm = nplm.Model(path, quiet_config())
    binary = tmp_path_factory.mktemp("bin") / (request.param + ".nplm")
    nplm.build_binary(path, str(binary))
    nb = nplm.Model(str(binary))
    return km, nm, nb


def test_order_and_vocab(pair):
    km, nm, nb = pair
    assert nm.order == km.order == nb.order
    for w in ["the", "UNK", "<s>", "</s>", "<unk>", "<UNK>", "zzqx", ""]:
        assert (w in nm) == (w in km) == (w in nb), w


def test_every_token_matches_kenlm(pair, texts):
    km, nm, nb = pair
    for line in texts:
        expect = list(km.full_scores(line))
        for model in (nm, nb):
            got = list(model.full_scores(line))
            assert len(got) == len(expect), line
            for (kp, kl, ko), (p, l, o) in zip(expect, got):
                assert abs(kp - p) <= 1e-5, line
                assert kl == l and ko == o, line


@pytest.mark.parametrize("bos,eos", [(True, True), (True, False), (False, True), (False, False)])
def test_score_and_perplexity(pair, texts, bos, eos):
    km, nm, nb = pair
    for line in texts[::7]:
        k = km.score(line, bos=bos, eos=eos)
        assert abs(nm.score(line, bos=bos, eos=eos) - k) <= 1e-4
        assert abs(nb.score(line, bos=bos, eos=eos) - k) <= 1e-4
        assert list(nm.full_scores(line, bos, eos)) == list(nb.full_scores(line, bos, eos))
    for line in texts[::13]:
        assert nm.perplexity(line) == pytest.approx(km.perplexity(line), rel=1e-4)


def test_batch_api_equals_per_sentence(pair, texts):
    _, nm, nb = pair
    sample = texts[::5]
    batch = nm.score_sentences(sample)
    assert batch.dtype == np.float64 and batch.shape == (len(sample),)
    assert np.array_equal(batch, [nm.score(s) for s in sample])
    assert np.array_equal(nb.score_sentences(sample, threads=2), batch)
    probs, lengths, oovs, offsets = nm.full_scores_batch(sample, bos=False, eos=True)
    for i, s in enumerate(sample):
        items = list(nm.full_scores(s, bos=False, eos=True))
        a, b = offsets[i], offsets[i + 1]
        assert [p for p, _, _ in items] == probs[a:b].tolist()
        assert [l for _, l, _ in items] == lengths[a:b].tolist()
        assert [o for _, _, o in items] == oovs[a:b].tolist()


def _walk(model, state_cls, words, start):
    """States after each word of a BaseScore chain, and the scores."""
    states, scores = [], []
    s = state_cls()
    (model.BeginSentenceWrite if start else model.NullContextWrite)(s)
    states.append(s)
    for w in words:
        out = state_cls()
        scores.append(model.BaseFullScore(s, w, out))
        states.append(out)
        s = out
    return states, scores


def test_state_chains_and_equality(pair, texts):
    km, nm, _ = pair
    rng = random.Random(1)
    ks_all, ns_all = [], []
    for line in rng.sample(texts, 40):
        words = line.split() + ["</s>"]
        start = rng.random() < 0.7
        ks, kscores = _walk(km, kenlm.State, words, start)
        ns, nscores = _walk(nm, nplm.State, words, start)
        for a, b in zip(kscores, nscores):
            assert abs(a.log_prob - b.log_prob) <= 1e-5
            assert (a.ngram_length, a.oov) == (b.ngram_length, b.oov)
        # The chain reproduces the whole-sentence score (which, like kenlm's,
        # accumulates in float32: allow for that rounding on long lines).
        total = sum(b.log_prob for b in nscores)
        full = nm.score(line, bos=start, eos=True)
        assert abs(total - full) <= 1e-4 + 1e-7 * len(words) * abs(full)
        ks_all += ks
        ns_all += ns
    # Which states are equal, and their order, is kenlm's (same word ids, same
    # minimisation, same comparison).
    for (i, a), (j, b) in itertools.combinations(list(enumerate(ks_all))[:300], 2):
        na, nb_ = ns_all[i], ns_all[j]
        assert (a == b) == (na == nb_)
        assert (a < b) == (na < nb_)
        if na == nb_:
            assert hash(na) == hash(nb_)


def test_oov_state_is_null(pair):
    km, nm, _ = pair
    s, out, null = nplm.State(), nplm.State(), nplm.State()
    nm.BeginSentenceWrite(s)
    nm.BaseScore(s, "zzqx", out)
    nm.NullContextWrite(null)
    ks, kout, knull = kenlm.State(), kenlm.State(), kenlm.State()
    km.BeginSentenceWrite(ks)
    km.BaseScore(ks, "zzqx", kout)
    km.NullContextWrite(knull)
    assert (out == null) == (kout == knull)
    assert null == nplm.State()


def test_same_state_in_and_out(pair):
    """kenlm gives a wrong number when in_state is out_state; nplm does not."""
    _, nm, _ = pair
    s, t = nplm.State(), nplm.State()
    nm.BeginSentenceWrite(s)
    nm.BeginSentenceWrite(t)
    expect = []
    u = nplm.State()
    for w in "the company said it".split():
        expect.append(nm.BaseScore(t, w, u))
        t, u = u, t
    got = [nm.BaseScore(s, w, s) for w in "the company said it".split()]
    assert got == expect
    assert s == t


def test_log10_distribution_sums_to_one(pair, texts):
    _, nm, _ = pair
    bos_id = nm.vocab.id("<s>")
    s, out = nplm.State(), nplm.State()
    nm.BeginSentenceWrite(s)
    for w in texts[3].split()[:6]:
        dist = nm.log10_distribution(s)
        assert dist.shape == (len(nm.vocab),)
        p = 10.0 ** dist.astype(np.float64)
        p[bos_id] = 0.0     # <s> is never predicted (lmplz gives it log10 p = 0)
        assert p.sum() == pytest.approx(1.0, abs=1e-4)
        # agrees with BaseScore word by word
        for word in ["the", "zzqx", "</s>"]:
            wid = nm.vocab.id(word)
            assert dist[wid] == nm.BaseScore(s, word, out)
        nm.BaseScore(s, w, out)
        s, out = out, s


def test_srilm_conventions_and_pruned_suffixes_match_kenlm(tmp_path, texts):
    need_shared()
    for path in srilm_variants(tmp_path):
        km = kenlm.Model(path, quiet_config(kenlm))
        nm = nplm.Model(path, quiet_config())
        for line in texts[::3]:
            for (kp, kl, ko), (p, l, o) in zip(km.full_scores(line), nm.full_scores(line)):
                assert abs(kp - p) <= 1e-5 and kl == l and ko == o, (path, line)
        rng = random.Random(5)
        ks_all, ns_all = [], []
        for line in rng.sample(texts, 30):
            ks, _ = _walk(km, kenlm.State, line.split() + ["</s>"], True)
            ns, _ = _walk(nm, nplm.State, line.split() + ["</s>"], True)
            ks_all += ks
            ns_all += ns
        for (i, a), (j, b) in itertools.combinations(list(enumerate(ks_all))[:200], 2):
            assert (a == b) == (ns_all[i] == ns_all[j])


def test_context_state_equals_chained_state(pair, texts):
    """core.state_for(words) (KenLM's GetState) gives the state a BaseScore chain
    over the same words reaches -- what composed models rebuild states with."""
    _, nm, _ = pair
    rng = random.Random(7)
    for line in rng.sample(texts, 60):
        words = line.split()
        s, out = nplm.State(), nplm.State()
        nm.NullContextWrite(s)
        ids = []
        for w in words:
            nm.BaseScore(s, w, out)
            s, out = out, s
            ids.append(nm.vocab.id(w))
            built = nm.core.state_for(ids)
            assert built == s, (line, ids)
            a, b = nplm.State(), nplm.State()
            assert nm.BaseScore(built, "the", a) == nm.BaseScore(s, "the", b)


# ----------------------------------------------------------------------------- hand-written ARPAs
# Small files with the corner cases of the format, loaded by both modules: either both
# refuse them, or every answer agrees (including which states compare equal).

_UNI = ["-1.5\t<unk>\t0", "0\t<s>\t-0.5", "-1.0\t</s>\t0", "-1.2\ta\t-0.3", "-1.3\tb\t-0.2", "-1.4\tc\t0"]
_BI = ["-0.5\t<s> a\t-0.1", "-0.6\ta b\t-0.2", "-0.7\tb c", "-0.4\tb </s>", "-0.8\tc a\t0", "-0.3\t<s> b\t-0.05"]
_TRI = ["-0.2\t<s> a b", "-0.25\ta b c", "-0.1\ta b </s>", "-0.15\t<s> b c"]
_ODD = ["a\x0bb", "c\x0cd", "e\x1cf", "<S>", "</S>", "<s>x", "\\data\\", "#", "1", "-0", "nan", "inf",
        "1e5", "été", "日本", "🐱", "x\u00a0y", "\u200b", "w" * 3000]


def _sub(lines, old, new):
    return [l.replace(old, new) for l in lines]


def _no_backoff(lines):
    return ["\t".join(l.split("\t")[:2]) for l in lines]


LOADABLE = {
    "plain": arpa_text(_UNI, _BI, _TRI),
    "bigram": arpa_text(_UNI, _no_backoff(_BI)),
    "no <unk>": arpa_text(_UNI[1:], _BI, _TRI),
    "<unk> -100": arpa_text(["-100\t<unk>\t0"] + _UNI[1:], _BI, _TRI),
    "<unk> -99": arpa_text(["-99\t<unk>\t0"] + _UNI[1:], _BI, _TRI),
    "<UNK>": arpa_text(["-1.5\t<UNK>\t0"] + _UNI[1:], _BI, _TRI),
    "<unk> last, in n-grams": arpa_text(_UNI[1:] + ["-1.5\t<unk>\t-0.4"], _BI + ["-0.9\t<unk> a", "-0.9\ta <unk>\t-0.1"],
                                    _TRI + ["-0.3\ta <unk> b"]),
    "<unk> in the middle": arpa_text(_UNI[1:3] + ["-1.5\t<unk>\t-0.4"] + _UNI[3:], _BI + ["-0.9\t<unk> a"], _TRI),
    "missing suffixes": arpa_text(_UNI, _BI, _TRI + ["-0.3\tb c b", "-0.2\tc a c"]),
    "back-offs omitted": arpa_text([l[:-2] if l.endswith("\t0") else l for l in _UNI],
                               [l[:-2] if l.endswith("\t0") else l for l in _BI], _TRI),
    "back-offs -0": arpa_text([l[:-2] + "\t-0" if l.endswith("\t0") else l for l in _UNI], _BI, _TRI),
    "highest order back-off 0": arpa_text(_UNI, _BI, [l + "\t0" for l in _TRI]),
    "positive back-off": arpa_text(_sub(_UNI, "a\t-0.3", "a\t0.3"), _BI, _TRI),
    "probability 0 and -0": arpa_text(_sub(_UNI, "-1.2\ta", "0\ta"), _sub(_BI, "-0.6\ta b", "-0\ta b"), _TRI),
    "<s> -99": arpa_text(_sub(_UNI, "0\t<s>", "-99\t<s>"), _BI, _TRI),
    "<s> -1": arpa_text(_sub(_UNI, "0\t<s>", "-1\t<s>"), _BI, _TRI),
    "<s> and </s> inside n-grams": arpa_text(_UNI, _BI + ["-0.2\ta <s>\t-0.1", "-0.2\t</s> a"], _TRI + ["-0.1\ta <s> a"]),
    "odd words": arpa_text(_UNI + [f"-1.{i + 1}\t{w}\t-0.{i + 1}" for i, w in enumerate(_ODD)],
                       _BI + [f"-0.{i + 1}\t{w} a" for i, w in enumerate(_ODD)] + ["-0.3\tété 日本\t-0.1"],
                       _TRI + ["-0.1\tété 日本 🐱"]),
    "CRLF": arpa_text(_UNI, _BI, _TRI).replace("\n", "\r\n"),
    "two spaces in an n-gram": arpa_text(_UNI, [l.replace(" ", "  ") for l in _BI], _TRI),
    "comment and blank lines": "# made by hand\n\n" + arpa_text(_UNI, _BI, _TRI).replace("\\2-grams:\n", "\\2-grams:\n\n\n"),
    "empty highest order": arpa_text(_UNI, _BI, []),
    "number spellings": arpa_text(_sub(_sub(_UNI, "-1.2\t", "-1.2e0\t"), "-0.3", "-3E-1"), _sub(_BI, "-0.5\t", "-.5\t"), _TRI),
    "-inf probabilities": arpa_text(_sub(_sub(_UNI, "-1.3\tb", "-inf\tb"), "-1.5\t<unk>", "-inf\t<unk>"),
                                _sub(_BI, "-0.6\ta b", "-inf\ta b"), _sub(_TRI, "-0.25\ta b c", "-inf\ta b c") + ["-0.3\tb c b"]),
    "-inf <s>": arpa_text(_sub(_UNI, "0\t<s>", "-inf\t<s>"), _BI, _TRI),
    "probability below float32": arpa_text(_sub(_UNI, "-1.3\tb", "-1e39\tb"), _BI, _TRI),
    "probability -1e30": arpa_text(_sub(_UNI, "-1.2\ta", "-1e30\ta"), _BI, _TRI),
}

BOTH_REFUSE = {
    "missing context": arpa_text(_UNI, _BI, _TRI + ["-0.3\tc b a"]),
    "back-off on the highest order": arpa_text(_UNI, _BI, [l + "\t-0.5" for l in _TRI]),
    "positive probability": arpa_text(_sub(_UNI, "-1.2\ta", "0.2\ta"), _BI, _TRI),
    "+inf probability": arpa_text(_sub(_UNI, "-1.2\ta", "inf\ta"), _BI, _TRI),
    "-INF": arpa_text(_sub(_UNI, "-1.2\ta", "-INF\ta"), _BI, _TRI),
    "-infinity": arpa_text(_sub(_UNI, "-1.2\ta", "-infinity\ta"), _BI, _TRI),
    "nan": arpa_text(_sub(_UNI, "-1.2\ta", "nan\ta"), _BI, _TRI),
    "-inf back-off": arpa_text(_sub(_UNI, "a\t-0.3", "a\t-inf"), _BI, _TRI),
    "no <s>": arpa_text([l for l in _UNI if "<s>" not in l], [l for l in _BI if "<s>" not in l],
                    [l for l in _TRI if "<s>" not in l]),
    "no </s>": arpa_text([l for l in _UNI if "</s>" not in l], [l for l in _BI if "</s>" not in l],
                     [l for l in _TRI if "</s>" not in l]),
    "word not in the unigrams": arpa_text(_UNI, _BI + ["-0.9\tq a"], _TRI),
    "space after the probability": arpa_text([l.replace("\t", " ", 1) for l in _UNI], _BI, _TRI),
    "trailing space": arpa_text([l + " " for l in _UNI], _BI, _TRI),
    "text before \\data\\": "hello\n" + arpa_text(_UNI, _BI, _TRI),
    "byte-order mark": "\ufeff" + arpa_text(_UNI, _BI, _TRI),
    "more entries than counted": arpa_text(_UNI, _BI, _TRI, counts=[6, 5, 4]),
    "fewer entries than counted": arpa_text(_UNI, _BI, _TRI, counts=[6, 7, 4]),
    "no \\end\\": arpa_text(_UNI, _BI, _TRI).replace("\\end\\\n", ""),
    "trailing garbage": arpa_text(_UNI, _BI, _TRI) + "junk\n",
}

# KenLM loads these defective files without a word (an n-gram ending in a missing
# <unk> is unreachable).  nplm refuses them, naming file and line.  (An entry listed
# again loads as in KenLM, with a warning: tests/backoff/test_duplicate_ngrams.py.)
NPLM_REFUSES = {
    "<unk> n-gram without the unigram": (arpa_text(_UNI[1:], _BI + ["-0.9\t<unk> a"], _TRI), 20,
                                         "'<unk>' appears in the 2-gram but the unigrams have no <unk>"),
}


def _close(a, b):
    return a == b or abs(a - b) <= 1e-5


def _perplexity(model, line):
    try:
        return model.perplexity(line)
    except OverflowError:
        return "OverflowError"


def assert_same_answers(km, nm, words, rng, sentences=40, chains=30):
    """Everything of the kenlm API on both models: membership, full_scores / score /
    perplexity with every bos/eos, BaseFullScore chains from both starts, and which
    states are equal, ordered, and (nplm) equal-hashed."""
    assert km.order == nm.order
    for w in words + ["zzqx", "<unk>", "<UNK>", "<s>", "</s>", ""]:
        assert (w in km) == (w in nm), w
    splittable = [w for w in words if w.split() == [w]]
    pool = splittable + ["zzqx", "<unk>", "<s>", "</s>"]
    lines = ["", " "] + [" ".join(rng.choice(pool) for _ in range(rng.randrange(0, 9))) for _ in range(sentences)]
    for line in lines:
        for bos, eos in itertools.product((True, False), repeat=2):
            k, n = list(km.full_scores(line, bos, eos)), list(nm.full_scores(line, bos, eos))
            assert len(k) == len(n), (line, bos, eos)
            for (kp, kl, ko), (p, l, o) in zip(k, n):
                assert _close(kp, p) and (kl, ko) == (l, o), (line, bos, eos, k, n)
            assert _close(km.score(line, bos, eos), nm.score(line, bos, eos)), (line, bos, eos)
        kp, p = _perplexity(km, line), _perplexity(nm, line)
        assert kp == p or abs(kp - p) <= 1e-6 * kp, (line, kp, p)
    ks_all, ns_all = [], []
    for _ in range(chains):
        seq = [rng.choice(words + ["zzqx", "<unk>", "<s>", "</s>"]) for _ in range(rng.randrange(1, 9))]
        start = rng.random() < 0.5
        ks, kscores = _walk(km, kenlm.State, seq, start)
        ns, nscores = _walk(nm, nplm.State, seq, start)
        for a, b in zip(kscores, nscores):
            assert _close(a.log_prob, b.log_prob) and (a.ngram_length, a.oov) == (b.ngram_length, b.oov), seq
        ks_all += ks
        ns_all += ns
    for (i, a), (j, b) in itertools.combinations(enumerate(ks_all), 2):
        assert (a == b) == (ns_all[i] == ns_all[j]), (i, j)
        assert (a < b) == (ns_all[i] < ns_all[j]), (i, j)
        if ns_all[i] == ns_all[j]:
            assert hash(ns_all[i]) == hash(ns_all[j])


def _write(tmp_path, text, name="m.arpa"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return str(path)


@pytest.mark.parametrize("name", list(LOADABLE))
def test_hand_written_arpa_matches_kenlm(tmp_path, name):
    path = _write(tmp_path, LOADABLE[name])
    km = kenlm.Model(path, quiet_config(kenlm))
    nm = nplm.Model(path, quiet_config())
    nplm.build_binary(path, str(tmp_path / "m.nplm"))
    words = ["a", "b", "c"] + (_ODD if name == "odd words" else [])
    for model in (nm, nplm.Model(str(tmp_path / "m.nplm"))):
        assert_same_answers(km, model, words, random.Random(name))


@pytest.mark.parametrize("name", list(BOTH_REFUSE))
def test_hand_written_arpa_refused_like_kenlm(tmp_path, name):
    path = _write(tmp_path, BOTH_REFUSE[name])
    with pytest.raises(OSError, match="Cannot read model"):
        kenlm.Model(path, quiet_config(kenlm))
    with pytest.raises(OSError, match="Cannot read model") as info:
        nplm.Model(path, quiet_config())
    assert isinstance(info.value, nplm.FormatError) and "m.arpa" in str(info.value)


@pytest.mark.parametrize("name", list(NPLM_REFUSES))
def test_defective_arpa_kenlm_loads_is_refused_with_its_line(tmp_path, name):
    text, line, message = NPLM_REFUSES[name]
    path = _write(tmp_path, text)
    kenlm.Model(path, quiet_config(kenlm))            # kenlm says nothing
    with pytest.raises(nplm.FormatError) as info:
        nplm.Model(path, quiet_config())
    assert info.value.line == line and message in str(info.value), str(info.value)


def test_missing_unk_keeps_unk_in_the_state(tmp_path):
    """KenLM substitutes a missing <unk> (log10 p = -100) after loading, with back-off
    +0.0, which marks it as extending: the state after an unknown word is not the null
    state, and p(<s> | that) is +0.0, not -0.0."""
    path = _write(tmp_path, LOADABLE["no <unk>"])
    nm = nplm.Model(path, quiet_config())
    for model, S in ((kenlm.Model(path, quiet_config(kenlm)), kenlm.State), (nm, nplm.State)):
        s, out, null = S(), S(), S()
        model.NullContextWrite(s)
        assert model.BaseScore(s, "zzqx", out) == -100.0
        model.NullContextWrite(null)
        assert out != null and out != S()
        after = S()
        assert math.copysign(1.0, model.BaseScore(out, "<s>", after)) == 1.0
    assert nm.core.state_for([0]) == out


# ----------------------------------------------------------------------------- random ARPAs

def _brute_backoff(text, words):
    """(log10 p, n-gram length) of each word and </s> after <s>,
    by the back-off formula straight from the ARPA text.  The length is KenLM's: the
    longest match among the n-grams and their suffixes.  A missing suffix is a blank
    entry that keeps longer n-grams reachable; it stores the backed-off probability,
    which KenLM reads back as -|p| (a positive back-off can make it positive)."""
    table, order = {}, 0
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) >= 2 and not line.startswith("ngram"):
            gram = tuple(fields[1].split(" "))
            with np.errstate(over="ignore"):      # float32, as read: -1e39 is -inf
                table[gram] = tuple(float(np.float32(f)) for f in (fields[0], fields[2] if len(fields) > 2 else 0))
            order = max(order, len(gram))
    present = {g[i:] for g in table for i in range(len(g))}
    unk = "<unk>" if ("<unk>",) in table else "<UNK>"

    def backed_off(ctx, w):
        n = next(n for n in range(len(ctx) + 1, 0, -1) if n == 1 or tuple(ctx[len(ctx) - n + 1:]) + (w,) in table)
        logp = table.get(tuple(ctx[len(ctx) - n + 1:]) + (w,), (-100.0, 0.0))[0]
        return logp + sum(table.get(tuple(ctx[len(ctx) - j:]), (0, 0.0))[1] for j in range(n, len(ctx) + 1))

    seq = ["<s>"] + [w if (w,) in table else unk for w in words] + ["</s>"]
    out = []
    for t in range(1, len(seq)):
        ctx, w = seq[max(0, t - order + 1):t], seq[t]
        L = max(k for k in range(1, len(ctx) + 2) if k == 1 or tuple(ctx[len(ctx) - k + 1:]) + (w,) in present)
        gram = tuple(ctx[len(ctx) - L + 1:]) + (w,)
        stored = table[gram][0] if gram in table else (-abs(backed_off(list(gram[:-1]), w)) if L > 1
                                                       else -100.0)
        logp = stored + sum(table.get(tuple(ctx[len(ctx) - j:]), (0, 0.0))[1] for j in range(L, len(ctx) + 1))
        out.append((logp, L))
    return out


def _same_scores(got, want):
    """(log10 p, length) lists equal: lengths exactly, probabilities to float32 sums' rounding."""
    return len(got) == len(want) and all(
        n == m and (p == q or math.isclose(p, q, rel_tol=1e-6, abs_tol=1e-5)) for (p, n), (q, m) in zip(got, want))


@settings(max_examples=120, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(model=random_arpa(), seed=st.integers(0, 2 ** 16))
def test_random_arpa_matches_kenlm(tmp_path, model, seed):
    text, vocab = model
    path = _write(tmp_path, text)
    try:
        km = kenlm.Model(path, quiet_config(kenlm))
    except OSError as e:
        # Tiny probing tables with many missing suffixes can run out of blank
        # slots in KenLM; nplm grows its tables instead.
        assert "Avoid pruning" in str(e) or "ProbingSize" in str(e), str(e)
        nm = nplm.Model(path, quiet_config())
        rng = random.Random(seed)
        for _ in range(8):
            words = [rng.choice(vocab + ["oov"]) for _ in range(rng.randint(0, 8))]
            got = [(p, n) for p, n, _ in nm.full_scores(" ".join(words))]
            assert _same_scores(got, _brute_backoff(text, words)), (words, got)
        return
    # the brute force is KenLM's semantics where KenLM loads the file
    words = [random.Random(seed).choice(vocab + ["oov"]) for _ in range(6)]
    assert _same_scores([(p, n) for p, n, _ in km.full_scores(" ".join(words))], _brute_backoff(text, words))
    nm = nplm.Model(path, quiet_config())
    nplm.build_binary(path, str(tmp_path / "m.nplm"))
    for model in (nm, nplm.Model(str(tmp_path / "m.nplm"))):
        assert_same_answers(km, model, vocab, random.Random(seed), sentences=8, chains=8)
