"""nplm's back-off engine against the real kenlm module, on every lmplz reference.

Every token's log10 probability, n-gram length and OOV flag; sentence scores and
perplexities; state chains and which states compare equal; binary == ARPA."""
import copy
import itertools
import pickle
import random

import kenlm
import numpy as np
import pytest

import nplm
from conftest import DATA, REFERENCE, need_shared, quiet_config, read_lines

ARPAS = sorted(p.name for p in REFERENCE.glob("*.arpa.xz")) if REFERENCE.is_dir() else []
TEXTS = ["ptb5k.txt", "wiki3k.txt", "tiny200.txt"]


def _kquiet():
    c = kenlm.Config()
    c.show_progress = False
    c.arpa_complain = kenlm.ARPALoadComplain.NONE
    return c


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
    km = kenlm.Model(path, _kquiet())
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


def _srilm_variants(tmp_path):
    """SRILM-style rewrites of a reference ARPA: <s> at -99, back-off columns
    omitted where zero, and lower-order n-grams pruned although longer n-grams
    still end with them (KenLM then fills 'blank' entries with backed-off values)."""
    import lzma
    text = lzma.open(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz", "rt").read()
    header, body = text.split("\n\n", 1)
    sections = {}
    order = []
    for block in body.strip().split("\n\n"):
        lines = block.strip().split("\n")
        if lines[0].startswith("\\end"):
            continue
        n = int(lines[0][1])
        order.append(n)
        sections[n] = lines[1:]
    top = max(order)
    grams = {n: [l.split("\t") for l in sections[n]] for n in order}
    contexts = {n: {" ".join(f[1].split()[:-1]) for f in grams[n + 1]} for n in order if n < top}
    suffixes = {n: {" ".join(f[1].split()[1:]) for f in grams[n + 1]} for n in order if n < top}
    rng = random.Random(3)
    pruned = {}
    for n in order:
        keep = []
        for f in grams[n]:
            if n == 1 and f[1] == "<s>":
                f = ["-99"] + f[1:]
            if 1 < n < top and f[1] in suffixes[n] and f[1] not in contexts[n] and rng.random() < 0.5:
                continue
            if len(f) == 3 and float(f[2]) == 0.0:
                f = f[:2]
            keep.append(f)
        pruned[n] = keep

    def write(path, gram_sets):
        out = ["\\data\\"] + [f"ngram {n}={len(gram_sets[n])}" for n in order] + [""]
        for n in order:
            out.append(f"\\{n}-grams:")
            out += ["\t".join(f) for f in gram_sets[n]]
            out.append("")
        out.append("\\end\\")
        path.write_text("\n".join(out) + "\n")
        return str(path)

    full = {n: [(["-99"] + f[1:]) if (n == 1 and f[1] == "<s>") else f for f in grams[n]] for n in order}
    return [write(tmp_path / "srilm_full.arpa", full), write(tmp_path / "srilm_pruned.arpa", pruned)]


def test_srilm_conventions_and_pruned_suffixes_match_kenlm(tmp_path, texts):
    need_shared()
    for path in _srilm_variants(tmp_path):
        km = kenlm.Model(path, _kquiet())
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
