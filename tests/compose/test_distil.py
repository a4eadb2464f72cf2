"""Distillation into back-off tables: checked against the real kenlm module, against
the teacher itself (a back-off teacher distilled over its own n-grams must come
back unchanged), and for normalisation over the whole vocabulary."""
import math
import subprocess
import warnings

import numpy as np
import pytest

import nplm
from nplm.backoff import arpa
from nplm.backoff.tables import NGramTables
from nplm.compose import distil
from nplm.errors import FormatError

from helpers import REFERENCE, kenlm_program, need_shared, quiet_config

kenlm = pytest.importorskip("kenlm")


def _model(path):
    return nplm.Model(str(path), quiet_config())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny200 order-4 lmplz model as a teacher, its text, and a held-out text."""
    need_shared()
    d = tmp_path_factory.mktemp("distil")
    lines = (REFERENCE / "tiny200.txt").read_text().splitlines()
    text = d / "train.txt"
    text.write_text("\n".join(lines[:150]) + "\n")
    held = d / "held.txt"
    held.write_text("\n".join(lines[150:]) + "\n")
    teacher = _model(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz")
    return teacher, text, held, d


def _as_dict(t, k):
    return {tuple(t.vocab[i] for i in row): (p, b)
            for row, p, b in zip(t.ids[k].tolist(), t.logprob[k].tolist(), t.backoff[k].tolist())}


def _context_states(model, tables):
    """kenlm states (and word tuples) for the empty context and every listed n-gram
    of order < N that is a context, built by feeding the words through kenlm."""
    out = [((), kenlm.State())]
    model.NullContextWrite(out[0][1])
    for k in range(tables.order - 1):
        for row in tables.ids[k]:
            words = tuple(tables.vocab[i] for i in row)
            if words[-1] == "</s>":
                continue
            s, t = kenlm.State(), kenlm.State()
            if words[0] == "<s>":
                model.BeginSentenceWrite(s)
                rest = words[1:]
            else:
                model.NullContextWrite(s)
                rest = words
            for w in rest:
                model.BaseScore(s, w, t)
                s, t = t, s
            out.append((words, s))
    return out


def test_back_off_teacher_over_its_own_ngrams_comes_back_unchanged():
    need_shared()
    ref = REFERENCE / "ptb5k.o3.arpa.xz"
    orig = arpa.read_arpa(ref)
    got = distil.distil(str(ref), 3, ngrams=str(ref))
    assert got.vocab == orig.vocab
    for k in range(3):
        a, b = _as_dict(got, k), _as_dict(orig, k)
        assert a.keys() == b.keys()
        # probabilities are the teacher's, exactly
        assert all(a[g][0] == b[g][0] for g in a)
        if k == 2:
            continue
        # back-offs are recomputed from those (rounded) probabilities: where the
        # listed continuations leave little mass, the ARPA's 8-digit rounding of
        # the probabilities limits how well 1 - sum p is known
        p_next = 10.0 ** orig.logprob[k + 1].astype(np.float64)
        ctx = {}
        for row, p in zip(orig.ids[k + 1].tolist(), p_next):
            key = tuple(orig.vocab[i] for i in row[:-1])
            ctx[key] = ctx.get(key, 0.0) + p
        for g in a:
            left = 1.0 - ctx.get(g, 0.0)
            tol = 1e-5 + 2e-7 / max(left, 1e-9)
            assert abs(a[g][1] - b[g][1]) <= tol, (g, a[g], b[g], left)


def test_text_ngrams_of_lmplz_model_reproduce_it(tiny, tmp_path):
    """lmplz lists every n-gram of its text: distilling the model over that text
    gives the same n-gram set and the same scores."""
    need_shared()
    ref = REFERENCE / "tiny200.o4.discount-fallback.arpa.xz"
    out = tmp_path / "d.arpa"
    distil.distil_to_file(str(ref), out, 4, text=str(REFERENCE / "tiny200.txt"))
    a, b = arpa.read_arpa(out), arpa.read_arpa(ref)
    assert a.counts == b.counts
    for k in range(4):
        assert _as_dict(a, k).keys() == _as_dict(b, k).keys()
    ka, kb = kenlm.Model(str(out)), kenlm.Model(str(ref))
    for line in (REFERENCE / "tiny200.txt").read_text().splitlines()[:60]:
        for (pa, la, _), (pb, lb, _) in zip(ka.full_scores(line), kb.full_scores(line)):
            assert la == lb
            assert abs(pa - pb) < 2e-5


@pytest.fixture(scope="module")
def distilled(tiny):
    """tiny200's 4-gram teacher distilled to order 3 over part of its text, with
    count thresholds and top-2 continuations: a table unlike the teacher's."""
    teacher, text, held, d = tiny
    out = d / "student.arpa"
    tables = distil.distil_to_file(teacher, out, 3, text=str(text), min_count=[1, 2], top_k=2,
                                   top_k_min_count=3)
    return tables, out


def test_distilled_arpa_loads_in_kenlm_and_scores_match(tiny, distilled):
    teacher, text, held, d = tiny
    tables, out = distilled
    assert tables.order == 3
    km = kenlm.Model(str(out))
    nm = _model(out)
    assert km.order == 3
    lines = held.read_text().splitlines() + text.read_text().splitlines()[:20]
    for line in lines:
        ks = list(km.full_scores(line))
        ns = list(nm.full_scores(line))
        assert len(ks) == len(ns)
        for (pk, lk, ok), (pn, ln_, on) in zip(ks, ns):
            assert abs(pk - pn) <= 1e-5
            assert lk == ln_ and ok == on


def test_listed_probabilities_are_the_teachers(tiny, distilled):
    teacher, text, held, d = tiny
    tables, out = distilled
    km = kenlm.Model(str(out))
    tk = kenlm.Model(str(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz"))
    rng = np.random.default_rng(0)
    for k in (1, 2):
        for i in rng.choice(tables.counts[k], size=min(200, tables.counts[k]), replace=False):
            words = [tables.vocab[j] for j in tables.ids[k][i]]
            for m in (km, tk):
                s, t = kenlm.State(), kenlm.State()
                if words[0] == "<s>":
                    m.BeginSentenceWrite(s)
                    ctx = words[1:-1]
                else:
                    m.NullContextWrite(s)
                    ctx = words[:-1]
                for w in ctx:
                    m.BaseScore(s, w, t)
                    s, t = t, s
                score = m.BaseScore(s, words[-1], t)
                if m is km:
                    student = score
                else:
                    assert abs(student - score) <= 1e-5, words
            assert abs(student - tables.logprob[k][i]) <= 1e-6


def test_every_context_sums_to_one_over_the_vocabulary(distilled):
    tables, out = distilled
    km = kenlm.Model(str(out))
    nm = _model(out)
    words = [w for w in tables.vocab if w != "<s>"]
    ids = np.array([nm.vocab.id(w) for w in words])
    states = _context_states(km, tables)
    assert len(states) > 500
    worst = 0.0
    for n, (ctx, ks) in enumerate(states):
        # nplm's state for the same context (KenLM's GetState)
        ns = nm.core.state_for([nm.vocab.id(w) for w in ctx])
        dist = nm.log10_distribution(ns)[ids].astype(np.float64)
        total = np.sum(10.0 ** dist)
        worst = max(worst, abs(total - 1.0))
        if n % 40 == 0:  # the real kenlm over the full vocabulary, for a sample
            out_state = kenlm.State()
            kt = sum(10.0 ** km.BaseScore(ks, w, out_state) for w in words)
            assert abs(kt - 1.0) <= 1e-5, ctx
    assert worst <= 1e-5


def test_unigram_and_specials(distilled, tiny):
    tables, out = distilled
    teacher = tiny[0]
    assert tables.vocab == teacher.vocab.words()
    p = 10.0 ** tables.logprob[0].astype(np.float64)
    s = tables.vocab.index("<s>")
    assert abs(p.sum() - p[s] - 1.0) < 1e-5
    assert tables.logprob[0][s] == 0.0            # lmplz's convention, copied from the teacher
    for k in range(1, tables.order):
        assert not np.any(tables.ids[k][:, -1] == s)    # <s> is never predicted
    # closure: every context and every lower-order n-gram is listed
    for k in range(1, tables.order):
        lower = {tuple(r) for r in tables.ids[k - 1].tolist()}
        for r in tables.ids[k].tolist():
            assert tuple(r[:-1]) in lower and tuple(r[1:]) in lower


def test_thresholds_and_top_k_change_the_listed_set(tiny):
    teacher, text, held, d = tiny
    base = distil.distil(teacher, 3, text=str(text))
    thr = distil.distil(teacher, 3, text=str(text), min_count=[2, 2])
    top = distil.distil(teacher, 3, text=str(text), top_k=3, top_k_min_count=2)
    assert thr.counts[1] < base.counts[1] and thr.counts[2] < base.counts[2]
    assert top.counts[1] > base.counts[1]
    # the added continuations are the teacher's most probable words after a context
    counts = {}
    for line in text.read_text().splitlines():
        w = ["<s>"] + line.split() + ["</s>"]
        for i in range(len(w) - 1):
            counts[w[i]] = counts.get(w[i], 0) + 1
    ctx = max((c, w) for w, c in counts.items() if w not in ("<s>", "</s>"))[1]
    s = teacher.core.state_for([teacher.vocab.id(ctx)])
    dist = teacher.log10_distribution(s)
    dist[teacher.vocab.id("<s>")] = -np.inf
    best = {teacher.vocab.word(int(i)) for i in np.argsort(-dist)[:3]}
    listed = {tuple(top.vocab[i] for i in r) for r in top.ids[1].tolist()}
    assert all((ctx, w) in listed for w in best)


def test_relative_entropy_pruning(tiny, tmp_path):
    teacher, text, held, d = tiny
    full = distil.distil(teacher, 3, text=str(text))
    n_full = sum(full.counts[1:])
    target = n_full // 2
    pruned = distil.distil(teacher, 3, text=str(text), prune_to=target)
    assert sum(pruned.counts[1:]) <= target
    assert sum(pruned.counts[1:]) >= target * 0.9
    arpa.write_arpa(pruned, tmp_path / "p.arpa")

    # a random pruning to the same per-order sizes (keeping closure) as the baseline
    rng = np.random.default_rng(1)
    s3 = full.ids[2][rng.choice(full.counts[2], pruned.counts[2], replace=False)]
    need2 = {tuple(r) for r in np.concatenate([s3[:, :2], s3[:, 1:]]).tolist()}
    others = [tuple(r) for r in full.ids[1].tolist() if tuple(r) not in need2]
    extra = rng.choice(len(others), max(0, pruned.counts[1] - len(need2)), replace=False)
    s2 = np.array(sorted(need2 | {others[i] for i in extra}), dtype=np.int32)
    z = lambda n: np.zeros(n, np.float32)  # noqa: E731
    ngr = NGramTables(vocab=full.vocab, ids=[full.ids[0], s2, s3], logprob=[full.logprob[0], z(len(s2)), z(len(s3))],
                      backoff=[full.backoff[0], z(len(s2)), z(len(s3))])
    rand = distil.distil(teacher, 3, ngrams=ngr)
    arpa.write_arpa(rand, tmp_path / "r.arpa")
    arpa.write_arpa(full, tmp_path / "f.arpa")

    def ppl(path):
        m = kenlm.Model(str(path))
        lines = held.read_text().splitlines()
        tot = sum(m.score(l) for l in lines)
        n = sum(len(l.split()) + 1 for l in lines)
        return 10 ** (-tot / n)

    p_full, p_pruned, p_rand = ppl(tmp_path / "f.arpa"), ppl(tmp_path / "p.arpa"), ppl(tmp_path / "r.arpa")
    assert rand.counts == pruned.counts
    assert p_pruned < p_rand
    assert p_pruned >= p_full * 0.97
    # still normalised
    nm = _model(tmp_path / "p.arpa")
    ids = np.array([nm.vocab.id(w) for w in pruned.vocab if w != "<s>"])
    for row in pruned.ids[1][:200].tolist():
        st = nm.core.state_for([nm.vocab.id(pruned.vocab[i]) for i in row])
        assert abs(np.sum(10.0 ** nm.log10_distribution(st)[ids].astype(np.float64)) - 1) < 1e-5


def test_lower_teacher_supplies_lower_orders(tiny):
    teacher, text, held, d = tiny
    lower_path = REFERENCE / "ptb5k.o2.arpa.xz"       # trained on a superset of tiny200's text
    got = distil.distil(teacher, 3, text=str(text), lower_teacher=str(lower_path))
    km = kenlm.Model(str(lower_path))
    tk = kenlm.Model(str(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz"))
    starts = 0
    for row, lp in zip(got.ids[1].tolist(), got.logprob[1].tolist()):
        w = [got.vocab[i] for i in row]
        s, t = kenlm.State(), kenlm.State()
        if w[0] == "<s>":
            # a whole history: the teacher's probability, not the lower teacher's
            tk.BeginSentenceWrite(s)
            assert abs(tk.BaseScore(s, w[1], kenlm.State()) - lp) < 1e-6, w
            starts += 1
            continue
        km.NullContextWrite(s)
        km.BaseScore(s, w[0], t)
        assert abs(km.BaseScore(t, w[1], kenlm.State()) - lp) < 1e-6, w
    assert starts > 10
    for row, lp in list(zip(got.ids[2].tolist(), got.logprob[2].tolist()))[:100]:
        w = [got.vocab[i] for i in row]
        s, t = kenlm.State(), kenlm.State()
        (tk.BeginSentenceWrite if w[0] == "<s>" else tk.NullContextWrite)(s)
        for x in (w[1:2] if w[0] == "<s>" else w[:2]):
            tk.BaseScore(s, x, t)
            s, t = t, s
        assert abs(tk.BaseScore(s, w[2], t) - lp) < 1e-6
    # a lower teacher that lacks some of the teacher's words is refused
    with pytest.raises(ValueError, match="lacks"):
        distil.distil(str(lower_path), 3, text=str(text), lower_teacher=teacher)


@pytest.mark.parametrize("shortlist", [0, 10])
def test_neural_teacher(tmp_path, tiny, shortlist):
    """A (random) neural network as the teacher: its probabilities land in the
    table, <null> is not a word of it, and every context sums to one (with a shortlist
    output layer too, whose out-of-shortlist words get their split)."""
    from nplm.neural.network import NeuralConfig, NeuralNet
    from nplm.neural.vocab import SPECIALS, Vocabulary
    teacher_bo, text, held, d = tiny
    words = sorted({w for line in text.read_text().splitlines() for w in line.split()})
    vocab = Vocabulary(list(SPECIALS) + words, np.arange(len(words) + 4) + 1)
    cfg = NeuralConfig(order=3, embedding_dim=8, hidden=(16, 8), context="full", output="softmax",
                       shortlist=shortlist)
    net = NeuralNet.create(cfg, vocab, seed=3)
    rng = np.random.default_rng(3)
    for k, v in net.params.items():
        if v.size:
            net.params[k] = (v + rng.normal(0, 0.5, v.shape)).astype(np.float32)
    path = tmp_path / "net.nplm"
    net.save(path)
    out = tmp_path / "n.arpa"
    tables = distil.distil_to_file(str(path), out, 3, text=str(text), min_count=[1, 2])
    assert "<null>" not in tables.vocab and len(tables.vocab) == len(vocab) - 1
    # listed trigrams carry the network's probability with nplm's <null> ... <s> padding
    null, bos = vocab.id("<null>"), vocab.id("<s>")
    rows = tables.ids[2][:300]
    ctx = np.array([[vocab.id(tables.vocab[i]) for i in r[:2]] for r in rows], np.int32)
    tgt = np.array([vocab.id(tables.vocab[r[2]]) for r in rows], np.int32)
    expect = net.log10_prob(ctx, tgt)
    assert np.max(np.abs(expect - tables.logprob[2][:300])) < 1e-4
    rows2 = tables.ids[1][:300]
    ctx2 = np.array([[bos if tables.vocab[r[0]] == "<s>" else null, vocab.id(tables.vocab[r[0]])]
                     if tables.vocab[r[0]] != "<s>" else [null, bos] for r in rows2], np.int32)
    tgt2 = np.array([vocab.id(tables.vocab[r[1]]) for r in rows2], np.int32)
    assert np.max(np.abs(net.log10_prob(ctx2, tgt2) - tables.logprob[1][:300])) < 1e-4
    km = kenlm.Model(str(out))
    nm = _model(out)
    ids = np.array([nm.vocab.id(w) for w in tables.vocab if w != "<s>"])
    for row in tables.ids[1][:100].tolist():
        st = nm.core.state_for([nm.vocab.id(tables.vocab[i]) for i in row])
        assert abs(np.sum(10.0 ** nm.log10_distribution(st)[ids].astype(np.float64)) - 1) < 1e-5
    for line in held.read_text().splitlines()[:20]:
        assert abs(km.score(line) - nm.score(line)) < 1e-4


def test_teacher_without_variable_history_warns(tmp_path, tiny):
    """A network trained on full histories only is poor after shorter ones, which the
    table's lower orders (or, below the network's order, all of it) take from it:
    distil warns, unless the network has variable history or --lower supplies them."""
    from nplm.neural.network import NeuralConfig, NeuralNet
    from nplm.neural.vocab import SPECIALS, Vocabulary
    teacher_bo, text, held, d = tiny
    words = sorted({w for line in text.read_text().splitlines() for w in line.split()})
    vocab = Vocabulary(list(SPECIALS) + words, np.arange(len(words) + 4) + 1)
    paths = {}
    for vh in (False, True):
        cfg = NeuralConfig(order=3, embedding_dim=8, output="softmax", variable_history=vh)
        paths[vh] = tmp_path / f"vh{vh}.nplm"
        NeuralNet.create(cfg, vocab, seed=3).save(paths[vh])
    with pytest.warns(UserWarning, match="orders 1..2 of the table use them.*--lower"):
        distil.distil(str(paths[False]), 3, text=str(text))
    with pytest.warns(UserWarning, match="every order of a 2-gram table uses them: distil at --order 3"):
        distil.distil(str(paths[False]), 2, text=str(text), lower_teacher=teacher_bo)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        distil.distil(str(paths[True]), 2, text=str(text))
        distil.distil(str(paths[False]), 3, text=str(text), lower_teacher=teacher_bo)


def test_bad_input(tiny, tmp_path):
    teacher, text, held, d = tiny
    bad = tmp_path / "bad.txt"
    bad.write_text("a b c\nthe <s> cat\n")
    with pytest.raises(FormatError, match=r"bad.txt:2.*<s>"):
        distil.distil(teacher, 3, text=str(bad))
    with pytest.raises(ValueError, match="text or a back-off model"):
        distil.distil(teacher, 3)
    with pytest.raises(ValueError, match="min_count"):
        distil.distil(teacher, 3, text=str(text), min_count=[0])
    with pytest.raises(ValueError, match="continuation"):
        distil.distil(teacher, 3, text=str(text), continuation=-1)
    empty, blank = tmp_path / "empty.txt", tmp_path / "blank.txt"
    empty.write_text("")
    blank.write_text("\n \n")
    for kwargs in (dict(text=str(empty)), dict(text=str(blank)), dict(text=str(text), min_count=10 ** 9)):
        with pytest.raises(ValueError, match="no n-grams of order 2"):    # not a unigram-only table
            distil.distil(teacher, 3, **kwargs)
    assert distil.distil(teacher, 1, text=str(empty)).order == 1         # what order 1 asks for
    before = text.read_bytes()
    with pytest.raises(ValueError, match="refusing to overwrite"):
        distil.distil_to_file(str(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz"), text, 3, text=str(text))
    assert text.read_bytes() == before


def test_cli_distil(tiny, tmp_path, capsys):
    from nplm.cli.main import main
    teacher, text, held, d = tiny
    out = tmp_path / "cli.arpa.gz"
    rc = main(["distil", str(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz"), "--text", str(text),
               "--order", "3", "--arpa", str(out), "--min-count", "1", "2"])
    assert rc == 0
    expect = distil.distil(teacher, 3, text=str(text), min_count=[1, 2])
    got = arpa.read_arpa(out)
    assert got.counts == expect.counts
    assert "n-grams: 1=" in capsys.readouterr().err
    k = kenlm.Model(str(out))
    assert k.order == 3


def test_cli_distil_writes_a_quantised_trie_as_build_binary(tiny, tmp_path):
    """--type trie --prob-bits 8 --backoff-bits 8: the bytes KenLM's build_binary writes
    from the ARPA the same command distils, which the real kenlm loads."""
    from nplm.cli.main import main
    teacher, text, held, d = tiny
    args = ["distil", str(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz"), "--text", str(text),
            "--order", "3", "--min-count", "1", "2", "-q"]
    assert main(args + ["--arpa", str(tmp_path / "t.arpa")]) == 0
    assert main(args + ["--arpa", str(tmp_path / "t.trie"), "--type", "trie", "--prob-bits", "8",
                        "--backoff-bits", "8"]) == 0
    build = subprocess.run([kenlm_program("build_binary"), "-q", "8", "-b", "8", "trie", str(tmp_path / "t.arpa"),
                            str(tmp_path / "kenlm.trie")], capture_output=True)
    assert build.returncode == 0, build.stderr
    assert (tmp_path / "t.trie").read_bytes() == (tmp_path / "kenlm.trie").read_bytes()
    assert kenlm.Model(str(tmp_path / "t.trie")).order == 3
    assert main(args + ["--arpa", str(tmp_path / "x.arpa"), "--prob-bits", "8"]) == 1


def test_pruning_criterion_is_the_exact_relative_entropy(tiny, tmp_path):
    """Stolcke's D for one n-gram equals P(h) * KL(p(.|h) || p'(.|h)), computed by brute
    force over the whole vocabulary after removing that n-gram alone."""
    teacher, text, held, d = tiny
    V = len(teacher.vocab)
    counted = distil.count_text(str(text), teacher.vocab.words(), 3)
    s = distil.build_structure(V, {n: counted[n][0] for n in (2, 3)})
    logprob = {n: distil._score(teacher, s.rows(n), 1).astype(np.float64) for n in (1, 2, 3)}
    bos, eos = teacher.vocab.id("<s>"), teacher.vocab.id("</s>")
    pred = np.ones(V, bool)
    pred[bos] = False
    bows, p = distil.compute_backoffs(s, logprob, pred)
    D = distil._prune_scores(s, logprob, p, bos, eos)
    keep_words = np.flatnonzero(pred)

    def context_dist(rows3, n3_lp, h):
        st = distil.build_structure(V, {2: s.rows(2), 3: rows3})
        lp = {1: logprob[1].copy(), 2: logprob[2].copy(), 3: n3_lp}
        b, _ = distil.compute_backoffs(st, lp, pred)
        # brute force back-off over the full vocabulary, in pure Python on the tables
        tri = {tuple(r): v for r, v in zip(st.rows(3).tolist(), lp[3])}
        big = {tuple(r): (v, bo) for r, v, bo in zip(st.rows(2).tolist(), lp[2], b[2])}
        out = []
        for w in keep_words:
            if (h[0], h[1], w) in tri:
                out.append(tri[(h[0], h[1], w)])
            else:
                bo = big[(h[0], h[1])][1] if (h[0], h[1]) in big else 0.0
                low = big[(h[1], w)][0] if (h[1], w) in big else b[1][h[1]] + lp[1][w]
                out.append(bo + low)
        return np.array(out) * math.log(10)

    rows3 = s.rows(3)
    rng = np.random.default_rng(0)
    ln10 = math.log(10)
    for i in rng.choice(len(rows3), 6, replace=False):
        h = tuple(rows3[i][:2])
        before = context_dist(rows3, logprob[3], h)
        mask = np.ones(len(rows3), bool)
        mask[i] = False
        after = context_dist(rows3[mask], logprob[3][mask], h)
        kl = np.sum(np.exp(before) * (before - after))
        # P(h) by the chain rule, P(<s>) being the unigram probability of </s>
        logP = (logprob[1][h[0]] if h[0] != bos else logprob[1][eos]) * ln10
        logP += logprob[2][s.index(np.array([h]))[0]] * ln10
        assert kl > 0
        assert abs(math.exp(logP) * kl - D[3][i]) <= 1e-6 * D[3][i], (h, kl, D[3][i])


@pytest.mark.parametrize("shortlist", [0, 15])
def test_network_fast_path_equals_the_query_core(tmp_path, shortlist):
    """Exactly normalised neural teachers are scored in batches by the network's own
    kernels; the numbers are the query core's (with a shortlist too: 25 of the words
    share its out-of-shortlist unit)."""
    from nplm.compose import _distil
    from nplm.neural.network import NeuralConfig, NeuralNet
    from nplm.neural.vocab import SPECIALS, Vocabulary
    words = list(SPECIALS) + [f"w{i}" for i in range(40)]
    net = NeuralNet.create(NeuralConfig(order=4, embedding_dim=8, hidden=(16, 8), context="full",
                                        output="softmax", shortlist=shortlist),
                           Vocabulary(words, np.arange(len(words))[::-1] + 1), seed=5)
    path = tmp_path / "n.nplm"
    net.save(path)
    model = _model(path)
    assert distil._exact_network(model) is not None
    rng = np.random.default_rng(2)
    for n in (1, 2, 3, 4, 5):
        rows = rng.integers(4, len(words), size=(300, n)).astype(np.int32)
        rows[::3, 0] = 1                                  # sentence starts
        if n == 1:
            rows[::3, 0] = 2
        core = np.empty(len(rows), np.float32)
        _distil.score_rows(model.core, rows, core)
        fast = distil._score(model, rows, 1)
        assert np.max(np.abs(core - fast)) < 2e-5, n


def test_continuation_shapes_equal_a_brute_force_sum(tiny):
    """The back-off-shaped lower orders (nplm/continuation.py) against the formula
    summed in plain Python over the whole vocabulary and every longer context:
    p(w | g) = (sum_e P(e) p_T(w | e) [(e, w) unlisted] + D(g) p_T(w | g))
               / (sum_e P(e) M(e) + D(g)),   D(g) = P(g) - sum_e P(e)."""
    from nplm.compose import continuation as cont
    teacher, text, held, d = tiny
    V = len(teacher.vocab)
    bos, eos = teacher.vocab.id("<s>"), teacher.vocab.id("</s>")
    counted = distil.count_text(str(text), teacher.vocab.words(), 3)
    s = distil.build_structure(V, {2: counted[2][0], 3: counted[3][0][counted[3][1] >= 2]})
    score = lambda r: distil._score(teacher, np.ascontiguousarray(r, np.int32), 1).astype(np.float64)
    lp = {n: score(s.rows(n)) for n in (1, 2, 3)}
    pred = np.ones(V, bool)
    pred[bos] = False
    ln = {n: 10.0 ** lp[n] for n in lp}
    P1 = ln[1].copy()
    P1[bos] = ln[1][eos]

    def full(ctx):
        st = teacher.core.state_for(list(ctx))
        return 10.0 ** teacher.log10_distribution(st).astype(np.float64)

    # unigrams: every word u is a context, every word a candidate
    listed2 = {}
    for (u, w) in s.rows(2).tolist():
        listed2.setdefault(u, set()).add(w)
    q = np.zeros(V)
    for u in range(V):
        if u == eos or (not pred[u] and u != bos):
            continue
        dist = full([u])
        for w in range(V):
            if pred[w] and w not in listed2.get(u, ()):
                q[w] += P1[u] * dist[w]
    got1 = cont.unigrams(score, s, lp, bos, eos, pred, fit=False)
    assert np.allclose(10.0 ** got1[pred], q[pred] / q[pred].sum(), rtol=1e-4, atol=1e-12)
    # fitted: the same numerators and leftover masses M(u) = P(u) sum_{w unlisted} p_T(w | u)
    M = np.zeros(V)
    for u in range(V):
        if u == eos or (not pred[u] and u != bos):
            continue
        dist = full([u])
        M[u] = P1[u] * sum(dist[w] for w in range(V) if pred[w] and w not in listed2.get(u, ()))
    fitted = cont.fit_unigrams(q * pred, M, s.prefix[2], s.word[2])
    got_fit = cont.unigrams(score, s, lp, bos, eos, pred)
    assert np.allclose(10.0 ** got_fit[pred], fitted[pred], rtol=1e-4, atol=1e-12)
    assert not np.allclose(fitted[pred], q[pred] / q[pred].sum(), rtol=1e-3)
    # whole distributions after the k most probable contexts only; each other context
    # leaves its exact mass (from the listed bigrams' scores) in the shape of the
    # teacher's unigrams r over the words it does not list
    k = 40
    ctxs = sorted((u for u in range(V) if u != eos and (pred[u] or u == bos) and P1[u] > 0), key=lambda u: -P1[u])
    r = np.where(pred, ln[1], 0.0) / ln[1][pred].sum()
    p2 = {tuple(x): p for x, p in zip(s.rows(2).tolist(), ln[2])}
    qk = np.zeros(V)
    for i, u in enumerate(ctxs):
        unlisted = [w for w in range(V) if pred[w] and w not in listed2.get(u, ())]
        if i < k:
            dist = full([u])
            qk[unlisted] += P1[u] * dist[unlisted]
        else:
            left = 1 - sum(p2[(u, w)] for w in listed2.get(u, ()))
            qk[unlisted] += P1[u] * left * r[unlisted] / (1 - sum(r[w] for w in listed2.get(u, ())))
    assert len(ctxs) > 2 * k
    got_k = cont.unigrams(score, s, lp, bos, eos, pred, fit=False, max_contexts=k)
    assert np.allclose(10.0 ** got_k[pred], qk[pred] / qk[pred].sum(), rtol=1e-4, atol=1e-12)
    assert not np.allclose(qk[pred] / qk[pred].sum(), q[pred] / q[pred].sum(), rtol=1e-3)
    assert np.array_equal(cont.unigrams(score, s, lp, bos, eos, pred, max_contexts=len(ctxs)), got_fit)
    # bigrams: contexts e = (x, g) listed as bigrams, candidates the words listed after g;
    # the K most probable e of each g scored exactly, the rest through p_T(w | g)
    listed3 = {}
    for (x, g, w), p3 in zip(s.rows(3).tolist(), ln[3]):
        listed3.setdefault((x, g), {})[w] = p3
    rows2 = s.rows(2).tolist()
    P2 = {tuple(r): P1[r[0]] * p for r, p in zip(rows2, ln[2])}
    for K in (10 ** 6, 2):
        got2 = cont.level(score, s, lp, 2, bos, eos, max_extensions=K)
        checked = 0
        for j, (g, w) in enumerate(rows2):
            ext = sorted((e for e in P2 if e[1] == g and P2[e] > 0), key=lambda e: -P2[e])
            if g == eos or not ext:
                assert got2[j] == lp[2][j]          # nothing backs off into it: teacher kept
                continue
            incl, rest = ext[:K], ext[K:]
            direct = max(P1[g] - sum(P2[e] for e in ext), 0.0)
            num = sum(P2[e] * 10.0 ** score(np.array([[e[0], e[1], w]]))[0]
                      for e in incl if w not in listed3.get(e, {}))
            num += ln[2][j] * (direct + sum(P2[e] for e in rest if w not in listed3.get(e, {})))
            den = sum(P2[e] * (1 - sum(listed3.get(e, {}).values())) for e in ext) + direct
            want = max(num / den, 1e-7 * ln[2][j])
            assert abs(10.0 ** got2[j] - want) <= 1e-6 + 1e-4 * want, (K, g, w, 10.0 ** got2[j], want)
            checked += 1
            if checked >= 150:
                break
    assert checked >= 100


@pytest.mark.parametrize("seed", range(4))
def test_fitted_unigrams_maximise_the_backoff_likelihood(seed):
    """fit_unigrams against the table it shapes: a word w that context u does not list
    gets bow(u) q(w) = L(u) q(w) / (1 - Q(u)).  The teacher-expected log-likelihood of
    those events, summed in plain Python, is at least what a generic optimiser finds
    from several starts, and better than the continuation ratio q ~ m."""
    from scipy.optimize import minimize

    from nplm.compose import continuation as cont
    rng = np.random.default_rng(seed)
    V = 12
    P = rng.dirichlet(np.ones(V))
    pT = rng.dirichlet(np.full(V, 0.5), size=V)                # p_T(w | u), rows u
    listed = [set(rng.choice(V, rng.integers(0, V - 2), replace=False).tolist()) for _ in range(V)]
    ctx = np.array([u for u in range(V) for w in sorted(listed[u])], np.int64)
    words = np.array([w for u in range(V) for w in sorted(listed[u])], np.int64)
    m = np.array([sum(P[u] * pT[u, w] for u in range(V) if w not in listed[u]) for w in range(V)])
    M = np.array([P[u] * sum(pT[u, w] for w in range(V) if w not in listed[u]) for u in range(V)])

    def loglik(q):
        total = 0.0
        for u in range(V):
            Q = sum(q[w] for w in listed[u])
            for w in range(V):
                if w not in listed[u]:
                    total += P[u] * pT[u, w] * math.log(M[u] / P[u] * q[w] / (1 - Q))
        return total

    fitted = cont.fit_unigrams(m, M, ctx, words)
    assert fitted.sum() == pytest.approx(1.0, abs=1e-12) and (fitted > 0).all()
    best = -np.inf
    for start in [np.log(m)] + [rng.normal(0, 1, V) for _ in range(3)]:
        res = minimize(lambda z: -loglik(np.exp(z - z.max()) / np.exp(z - z.max()).sum()), start,
                       method="BFGS", options={"gtol": 1e-10})
        best = max(best, -res.fun)
    assert loglik(fitted) >= best - 1e-9
    assert loglik(fitted) > loglik(m / m.sum()) + 1e-6


def test_continuation_table_is_normalised_and_loads_in_kenlm(tiny, tmp_path):
    teacher, text, held, d = tiny
    out = tmp_path / "cont.arpa"
    tables = distil.distil_to_file(teacher, out, 3, text=str(text), continuation=True, prune_to=2000)
    plain = distil.distil(teacher, 3, text=str(text), prune_to=2000)
    assert tables.counts == plain.counts
    assert not np.allclose(tables.logprob[0], plain.logprob[0])     # reshaped
    km, nm = kenlm.Model(str(out)), _model(out)
    ids = np.array([nm.vocab.id(w) for w in tables.vocab if w != "<s>"])
    for words, _ in _context_states(km, tables)[:200]:
        st = nm.core.state_for([nm.vocab.id(w) for w in words])
        assert abs(np.sum(10.0 ** nm.log10_distribution(st)[ids].astype(np.float64)) - 1) < 1e-5
    for line in held.read_text().splitlines()[:20]:
        assert abs(km.score(line) - nm.score(line)) < 1e-4


@pytest.mark.parametrize("memory", ["80%", "1K"])
def test_count_text_equals_a_brute_force_count(tmp_path, memory):
    """Every order's n-gram counts (<s> before and </s> after each line, never across
    lines; words split at ASCII white space as KenLM's queries split them) equal a
    plain Python count, in memory and with a budget so small that every chunk spills a
    run and the runs are summed in 64 parts; the temporary files are gone after."""
    from collections import Counter

    from nplm.neural.vocab import SPECIALS, Vocabulary
    rng = np.random.default_rng(5)
    words = list(SPECIALS) + [f"v{i}" for i in range(40)]
    vocab = Vocabulary(words, np.ones(len(words), np.int64))
    lines = [" ".join(rng.choice(words[4:], rng.integers(0, 12))) for _ in range(20000)]
    lines[7] = "never seen words x y"                 # OOVs count as <unk>
    lines[8] = "v1\x0bv2\x0cv3 <unk>\tv4 \r"          # every ASCII space splits
    text = tmp_path / "t.txt"
    text.write_text("\n".join(lines) + "\n")
    temp = tmp_path / "temp"
    temp.mkdir()
    bos, eos = vocab.id("<s>"), vocab.id("</s>")
    got = distil.count_text(str(text), vocab.words, 4, memory=memory, temp_prefix=str(temp))
    expect = {n: Counter() for n in (2, 3, 4)}
    for line in lines:
        ids = [bos] + [vocab.id(w) for w in line.split()] + [eos]
        for n in (2, 3, 4):
            for j in range(n - 1, len(ids)):
                expect[n][tuple(ids[j - n + 1:j + 1])] += 1
    assert len(expect[4]) > 4096                       # more than the first table holds
    for n in (2, 3, 4):
        rows, counts = got[n]
        assert rows.shape == (len(expect[n]), n) and rows.dtype == np.int32
        assert dict(zip(map(tuple, rows.tolist()), counts.tolist())) == dict(expect[n])
    # with thresholds, exactly the n-grams seen often enough
    some = distil.count_text(str(text), vocab.words, 4, {2: 1, 3: 3, 4: 2}, memory=memory,
                             temp_prefix=str(temp))
    for n, c in ((2, 1), (3, 3), (4, 2)):
        rows, counts = some[n]
        assert dict(zip(map(tuple, rows.tolist()), counts.tolist())) == \
            {g: k for g, k in expect[n].items() if k >= c}
    assert list(temp.iterdir()) == []


@pytest.mark.parametrize("memory", ["80%", "1K"])
def test_count_text_refuses_reserved_tokens(tmp_path, memory):
    """<s>, </s> and <null> in a text are errors naming the file and the line, whether
    or not the teacher knows <null>, in memory and spilling; no temporary file stays."""
    from nplm.neural.vocab import SPECIALS
    body = "".join(f"w{i % 50} w{i % 7} w{i % 11}\n" for i in range(30000))
    temp = tmp_path / "temp"
    temp.mkdir()
    for words in (list(SPECIALS) + ["w1"], ["<unk>", "<s>", "</s>", "w1"]):
        for token in ("<s>", "</s>", "<null>"):
            text = tmp_path / "bad.txt"
            text.write_text(body + f"w1 {token} w2\n" + body)
            with pytest.raises(FormatError, match=rf"bad.txt:30001: .*{token}"):
                distil.count_text(str(text), words, 3, memory=memory, temp_prefix=str(temp))
            assert list(temp.iterdir()) == []


@pytest.mark.parametrize("kwargs,message", [
    (dict(continuation=3), "orders below order 3 to reshape"),        # orders 1..2 only
    (dict(continuation=1.5), "continuation"),
    (dict(top_k=-2), "top_k"), (dict(top_k=1.5), "top_k"), (dict(top_k=True), "top_k"),
])
def test_out_of_range_options_are_refused(tiny, kwargs, message):
    """Values that were silently clipped or ignored (continuation beyond order - 1, a
    negative top_k) are refused before any work."""
    teacher, text, held, d = tiny
    with pytest.raises(ValueError, match=message):
        distil.distil(teacher, 3, text=str(text), **kwargs)


@pytest.mark.parametrize("shortlist", [0, 20])
@pytest.mark.parametrize("output,mode", [("class", "class"), ("tree", "tree"), ("softmax", "exact")])
def test_top_k_of_one_word_contexts_from_distributions_equals_the_query_core(tmp_path, output, mode, shortlist):
    """The one-word contexts' top-k continuations come from whole distributions (GEMM
    blocks) instead of V queries per context; the chosen words, best first, are those
    the query core ranks first (also where a shortlist splits its OOS unit's mass)."""
    from helpers import tiny_net
    net = tiny_net(seed=7, V=64, n_classes=6, output=output, order=4, hidden=(16,), embedding_dim=8,
                   shortlist=shortlist, shortlist_input=bool(shortlist))
    words = net.vocab.words
    rng = np.random.default_rng(7)
    path = tmp_path / "n.nplm"
    net.save(path)
    model = nplm.Model(str(path), normalization=mode)
    assert distil.exact_network_of(model) is not None
    ctx = np.array([[2]] + [[i] for i in range(4, len(words))], np.int32)      # <s> and every word
    cand = np.arange(4, len(words), dtype=np.int32)[rng.permutation(len(words) - 4)][:40]
    fast = distil._top_continuations(model, ctx, None, cand, 5, 1)
    core = np.empty(len(ctx) * len(cand), np.float32)
    rows = np.column_stack([np.repeat(ctx[:, 0], len(cand)), np.tile(cand, len(ctx))]).astype(np.int32)
    from nplm.compose import _distil
    _distil.score_rows(model.core, rows, core)
    expect = rows.reshape(len(ctx), len(cand), 2)[np.arange(len(ctx))[:, None],
                                                   np.argsort(-core.reshape(len(ctx), -1), axis=1, kind="stable")[:, :5]]
    if not shortlist:
        np.testing.assert_array_equal(fast, expect.reshape(-1, 2))
        return
    # out-of-shortlist words of equal counts tie exactly, and the two paths' last-bit
    # differences may order them either way: the chosen words' probabilities are the
    # best ones, best first
    score = dict(zip(map(tuple, rows.tolist()), core.tolist()))
    got = np.array([score[tuple(r)] for r in fast.tolist()]).reshape(len(ctx), 5)
    best = np.array([score[tuple(r)] for r in expect.reshape(-1, 2).tolist()]).reshape(len(ctx), 5)
    np.testing.assert_allclose(got, best, atol=1e-6)
    np.testing.assert_array_equal(fast[:, 0], expect.reshape(-1, 2)[:, 0])
