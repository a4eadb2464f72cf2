"""Kneser-Ney estimation: lmplz's reference ARPAs, a brute-force modified Kneser-Ney
written from the definitions, normalisation, and bad input."""
import gzip
import io
import lzma
import math
import random
import sys
from collections import defaultdict

import numpy as np
import pytest

from nplm.backoff.kneser_ney import DiscountError, estimate
from nplm.errors import FormatError

from helpers import LMPLZ_CASES as CASES
from helpers import REFERENCE, need_reference, run_cli


def parse_arpa(data):
    """{(order, "w1 w2 ..."): (log10 p, log10 back-off)} from ARPA text; checks the
    header counts.  Deliberately independent of nplm's ARPA reader."""
    entries, declared, seen = {}, {}, {}
    body = data.split("\\data\\\n", 1)[1]
    header, _, body = body.partition("\n\n")
    for line in header.splitlines():
        k, c = line[len("ngram "):].split("=")
        declared[int(k)] = int(c)
    for section in body.split("\n\n"):
        if not section.strip() or section.strip() == "\\end\\":
            continue
        title, *lines = section.strip("\n").split("\n")
        assert title.startswith("\\") and title.endswith("-grams:"), title
        k = int(title[1:title.index("-")])
        seen[k] = len(lines)
        for line in lines:
            parts = line.split("\t")
            entries[(k, parts[1])] = (float(parts[0]), float(parts[2]) if len(parts) > 2 else 0.0)
    assert seen == declared, (seen, declared)
    return entries


def table_entries(t):
    out = {}
    vocab = np.array(t.vocab, dtype=object)
    for k in range(t.order):
        columns = [vocab[t.ids[k][:, j]].tolist() for j in range(k + 1)]
        names = [" ".join(words) for words in zip(*columns)]
        out.update(zip(((k + 1, name) for name in names),
                       zip(t.logprob[k].tolist(), t.backoff[k].tolist())))
    return out


def assert_same_model(ours, ref, tol=1e-5):
    assert ours.keys() == ref.keys(), (f"missing {sorted(ref.keys() - ours.keys())[:5]}, "
                                       f"extra {sorted(ours.keys() - ref.keys())[:5]}")
    keys = list(ref)
    a = np.fromiter((v for k in keys for v in ours[k]), dtype=np.float64, count=2 * len(keys))
    b = np.fromiter((v for k in keys for v in ref[k]), dtype=np.float64, count=2 * len(keys))
    diff = np.abs(a - b).reshape(-1, 2).max(axis=1)
    worst = int(diff.argmax())
    assert diff[worst] <= tol, f"{keys[worst]}: ours {ours[keys[worst]]} reference {ref[keys[worst]]}"


# --------------------------------------------------------------------------- lmplz references


@pytest.mark.parametrize("name,text,order,options", CASES, ids=[c[0] for c in CASES])
def test_matches_lmplz_reference(name, text, order, options, tmp_path):
    need_reference()
    tables = estimate(REFERENCE / text, order, progress=False, **options)
    with lzma.open(REFERENCE / f"{name}.arpa.xz", "rt", encoding="utf-8") as f:
        ref_text = f.read()
    assert_same_model(table_entries(tables), parse_arpa(ref_text))
    # lmplz's vocabulary order (<unk> <s> </s>, then first appearance) and n-gram
    # order (suffix order) are reproduced, so ids agree and the files can be diffed.
    ref_unigrams = [line.split("\t")[1] for line in
                    ref_text.split("\\1-grams:\n")[1].split("\n\n")[0].splitlines()]
    assert tables.vocab == ref_unigrams


@pytest.mark.parametrize("name,text,order,options", CASES[1:2] + CASES[5:], ids=["o3", "prune", "wiki", "fallback"])
def test_arpa_bytes_equal_lmplz(name, text, order, options, tmp_path):
    """float32 arithmetic in lmplz's order: the ARPA is byte-identical."""
    need_reference()
    out = tmp_path / "model.arpa"
    estimate(REFERENCE / text, order, arpa=out, progress=False, **options)
    with lzma.open(REFERENCE / f"{name}.arpa.xz", "rb") as f:
        assert out.read_bytes() == f.read()


# --------------------------------------------------------------------------- brute force

BOS, EOS, UNK = "<s>", "</s>", "<unk>"


def brute_force_kn(sentences, order, fallback=None, prune=None, interpolate_unigrams=True,
                   allowed=None):
    """Interpolated modified Kneser-Ney from the definitions, in plain Python floats.

    Returns {(order, words tuple): (log10 p, log10 back-off)} for the kept n-grams.
    Rules (lmplz's): sentences are padded with order-1 <s> and one </s>; the
    highest order keeps raw counts; a lower-order n-gram's adjusted count is the
    number of distinct words (or <s>) before it, but n-grams starting with <s> keep
    their raw count; n-grams with <s> after their first word are padding.  The
    counts-of-counts of each lower order take its last n-gram in suffix order with
    its raw count (an lmplz quirk that the discounts depend on)."""
    N = order
    vocab = [UNK, BOS, EOS]
    for s in sentences:
        for w in s:
            if w not in vocab:
                vocab.append(w)
    raw = [defaultdict(int) for _ in range(N + 1)]      # raw[k][ngram]
    left = [defaultdict(set) for _ in range(N + 1)]     # left[k][ngram] = preceding words
    for s in sentences:
        padded = [BOS] * (N - 1) + list(s) + [EOS]
        for end in range(N - 1, len(padded)):
            for k in range(1, N + 1):
                g = tuple(padded[end - k + 1:end + 1])
                if BOS in g[1:]:
                    continue
                raw[k][g] += 1
                if k < N:
                    left[k][g].add(padded[end - k])
    adj = [dict() for _ in range(N + 1)]
    for k in range(1, N + 1):
        for g, c in raw[k].items():
            adj[k][g] = c if (k == N or g[0] == BOS) else len(left[k][g])
    for w in (UNK, BOS):
        adj[1].setdefault((w,), 0)
        raw[1].setdefault((w,), 0)
    thresholds = list(prune or [0]) + [list(prune or [0])[-1]] * N
    if allowed is not None:
        allowed = set(allowed) | {UNK, BOS, EOS}
    pruned = [set() for _ in range(N + 1)]
    for k in range(2, N + 1):
        for g in adj[k]:
            if raw[k][g] <= thresholds[k - 1] or (allowed is not None and any(w not in allowed for w in g)):
                pruned[k].add(g)
    if allowed is not None:
        pruned[1] = {g for g in adj[1] if g[0] not in allowed}
    index = {w: i for i, w in enumerate(vocab)}

    def suffix_key(g):
        return tuple(index[w] for w in reversed(g))

    discounts = {}
    for k in range(1, N + 1):
        counts = dict(adj[k])
        if k < N and N > 1:
            last = max(counts, key=suffix_key)
            counts[last] = raw[k][last]
        n = [sum(1 for c in counts.values() if c == j) for j in range(5)]
        d = None
        if all(n[j] for j in (1, 2, 3)):
            y = n[1] / (n[1] + 2 * n[2])
            d = [0.0] + [j - (j + 1) * y * n[j + 1] / n[j] for j in (1, 2, 3)]
            if any(not 0 <= d[j] <= j for j in (1, 2, 3)):
                d = None
        if d is None:
            if fallback is None:
                raise DiscountError(f"order {k}")
            d = [0.0] + list(fallback)
        discounts[k] = d

    def disc(k, a):
        return discounts[k][min(a, 3)]

    # gamma and denominators per context
    denom = [defaultdict(float) for _ in range(N + 1)]
    gnum = [defaultdict(float) for _ in range(N + 1)]
    for k in range(1, N + 1):
        for g, a in adj[k].items():
            denom[k][g[:-1]] += a
            gnum[k][g[:-1]] += a if g in pruned[k] else (disc(k, a) if a > 0 else 0.0)
    kept_unigrams = [g for g in adj[1] if g not in pruned[1]]
    uniform = 1.0 / (len(kept_unigrams) - 1)
    prob = {}
    for k in range(1, N + 1):
        for g, a in adj[k].items():
            if g in pruned[k]:
                continue
            ctx = g[:-1]
            u = (a - disc(k, a)) / denom[k][ctx]
            gamma = gnum[k][ctx] / denom[k][ctx]
            if k == 1:
                if g == (BOS,):
                    p = 1.0
                elif interpolate_unigrams:
                    p = u + gamma * uniform
                else:
                    p = u + (gamma if g == (UNK,) else 0.0)
            else:
                p = u + gamma * prob[g[1:]]
            prob[g] = p
    out = {}
    for g, p in prob.items():
        k = len(g)
        bo = 0.0
        if k < N and denom[k + 1].get(g, 0) > 0:
            bo = math.log10(gnum[k + 1][g] / denom[k + 1][g])
        out[(k, " ".join(g))] = (min(0.0, math.log10(p)), bo)
    return out


def random_corpus(seed, sentences, words, max_len=10):
    """Sentences from a sparse Markov chain over Zipf-distributed words, so that
    n-grams of every order recur with varied left contexts, as in real text."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(words)]
    zipf = [1.0 / (i + 1) for i in range(words)]
    successors = {w: rng.choices(vocab, zipf, k=3) for w in vocab}
    out = []
    for _ in range(sentences):
        s = []
        w = rng.choices(vocab, zipf)[0]
        for _ in range(rng.randint(0, max_len)):
            s.append(w)
            w = rng.choice(successors[w]) if rng.random() < 0.8 else rng.choices(vocab, zipf)[0]
        out.append(s)
    return out


def as_text(sentences):
    return io.BytesIO(("\n".join(" ".join(s) for s in sentences) + "\n").encode("utf-8"))


BRUTE = [  # seed, sentences, words, order, options
    (1, 300, 150, 1, {}),
    (2, 300, 40, 2, {}),
    (3, 400, 80, 3, {}),
    (4, 400, 80, 4, {}),
    (5, 300, 80, 5, {}),
    (6, 300, 40, 3, {"interpolate_unigrams": False}),
    (7, 400, 40, 4, {"prune": [0, 1, 2]}),
    (8, 400, 150, 3, {"prune": [0, 0, 1]}),
    (9, 40, 6, 3, {"discount_fallback": (0.4, 0.9, 1.3)}),
    (10, 20, 30, 4, {"discount_fallback": True}),
]


def _brute_options(options):
    fallback = options.get("discount_fallback")
    if fallback is True:
        fallback = (0.5, 1.0, 1.5)
    return dict(fallback=fallback, prune=options.get("prune"),
                interpolate_unigrams=options.get("interpolate_unigrams", True))


@pytest.mark.parametrize("seed,n,words,order,options", BRUTE)
def test_kernel_agrees_with_brute_force(seed, n, words, order, options):
    corpus = random_corpus(seed, n, words)
    expected = brute_force_kn(corpus, order, **_brute_options(options))
    tables = estimate(as_text(corpus), order, progress=False, **options)
    assert_same_model(table_entries(tables), expected)


def test_brute_force_with_unk_in_text_and_limit_vocab(tmp_path):
    corpus = random_corpus(11, 600, 150)
    corpus = [[UNK if w == "w5" else w for w in s] for s in corpus]
    expected = brute_force_kn(corpus, 3)
    with pytest.warns(UserWarning, match="<unk> appears"):
        tables = estimate(as_text(corpus), 3, progress=False)
    assert_same_model(table_entries(tables), expected)
    allowed = {f"w{i}" for i in range(0, 12, 2)}
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text(" ".join(sorted(allowed)) + "\n")
    expected = brute_force_kn(corpus, 3, allowed=allowed)
    with pytest.warns(UserWarning):
        tables = estimate(as_text(corpus), 3, limit_vocab_file=vocab_file, progress=False)
    assert_same_model(table_entries(tables), expected)
    assert set(tables.vocab) == allowed | {UNK, BOS, EOS}


# --------------------------------------------------------------------------- normalisation


def backoff_prob(index, context, word):
    """p(word | context) by ARPA back-off over {(words tuple): (log p, log bo)}."""
    logp = 0.0
    while True:
        hit = index.get(context + (word,))
        if hit is not None:
            return 10.0 ** (logp + hit[0])
        bo = index.get(context)
        logp += bo[1] if bo is not None else 0.0
        context = context[1:]


def model_index(tables):
    return {tuple(tables.vocab[i] for i in row): (float(p), float(b))
            for k in range(tables.order)
            for row, p, b in zip(tables.ids[k], tables.logprob[k], tables.backoff[k])}


@pytest.mark.parametrize("order,options", [
    (1, {}), (2, {}), (3, {}), (4, {"interpolate_unigrams": False}),
    (3, {"prune": [0, 1]}), (4, {"prune": [0, 0, 1, 2]}),
])
def test_every_context_sums_to_one(order, options):
    corpus = random_corpus(order * 7 + len(options), 600, 150)
    tables = estimate(as_text(corpus), order, progress=False, **options)
    index = model_index(tables)
    words = [w for w in tables.vocab if w != BOS]
    contexts = [g for g in index if len(g) < order and g[-1] != EOS]
    assert order == 1 or len(contexts) > 100
    contexts = [()] + random.Random(order).sample(contexts, min(len(contexts), 150))
    for ctx in contexts:
        total = sum(backoff_prob(index, ctx, w) for w in words)
        assert abs(total - 1.0) < 1e-6, (ctx, total)


def test_sums_to_one_with_limited_vocabulary(tmp_path):
    corpus = random_corpus(3, 600, 150)
    vocab_file = tmp_path / "v.txt"
    vocab_file.write_text("w0\nw1 w2\tw3\n")
    tables = estimate(as_text(corpus), 3, limit_vocab_file=vocab_file, progress=False)
    index = model_index(tables)
    words = [w for w in tables.vocab if w != BOS]
    assert sorted(words) == sorted(["<unk>", "</s>", "w0", "w1", "w2", "w3"])
    contexts = [g for g in index if len(g) < 3 and g[-1] != EOS]
    for ctx in [()] + random.Random(0).sample(contexts, min(len(contexts), 150)):
        assert abs(sum(backoff_prob(index, ctx, w) for w in words) - 1.0) < 1e-6


# --------------------------------------------------------------------------- input handling


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_compressed_and_file_object_inputs_agree(tmp_path):
    corpus = random_corpus(21, 600, 150)
    raw = as_text(corpus).getvalue()
    plain = estimate(write(tmp_path, "c.txt", raw), 3, progress=False)
    gz = estimate(write(tmp_path, "c.txt.gz", gzip.compress(raw)), 3, progress=False)
    xz = estimate(write(tmp_path, "c.xz", lzma.compress(raw)), 3, progress=False)
    text_obj = estimate(io.StringIO(raw.decode()), 3, progress=False)
    ref = table_entries(plain)
    for other in (gz, xz, text_obj):
        assert table_entries(other) == ref


def test_whitespace_and_line_endings_like_lmplz(tmp_path):
    """Words split on space, tab, CR and NUL only; CRLF files equal LF files; a
    last line without newline is still a sentence."""
    corpus = random_corpus(22, 600, 150)
    lf = "\n".join(" ".join(s) for s in corpus) + "\n"
    crlf = lf.replace("\n", "\r\n").replace(" ", " \t ")
    a = estimate(io.BytesIO(lf.encode()), 3, progress=False)
    b = estimate(io.BytesIO(crlf.encode()), 3, progress=False)
    c = estimate(io.BytesIO(lf.rstrip("\n").encode()), 3, progress=False)
    assert table_entries(a) == table_entries(b) == table_entries(c)
    # a non-breaking space is part of a word, as in lmplz
    nb = estimate(io.BytesIO((lf + "x\u00a0y\n").encode()), 2, progress=False, discount_fallback=True)
    assert "x\u00a0y" in nb.vocab


def test_empty_and_blank_text(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        estimate(write(tmp_path, "e.txt", b""), 3, progress=False)
    with pytest.raises(ValueError, match="blank lines"):
        estimate(write(tmp_path, "b.txt", b"\n  \n\t\n"), 3, progress=False)


@pytest.mark.parametrize("order,error", [(0, ValueError), (-2, ValueError), (33, ValueError),
                                         (10**9, ValueError), (2.5, TypeError), ("3", TypeError)])
def test_bad_order(order, error):
    with pytest.raises(error, match="order"):
        estimate(as_text([["a"]]), order, progress=False)


def test_orders_nplm_cannot_load_are_refused(tmp_path):
    """Order 17..32 used to be estimated (the kernel counts that far) into models that
    nplm.Model then refused or crashed on: refuse up front, naming the limit."""
    import nplm
    from nplm._kernels import QUERY_MAX_ORDER
    text = as_text(random_corpus(5, 60, 20, max_len=30))
    for order in (QUERY_MAX_ORDER + 1, 20, 32):
        with pytest.raises(ValueError, match=f"between 1 and {QUERY_MAX_ORDER} .*got {order}"):
            estimate(text, order, binary=str(tmp_path / "x.nplm"), progress=False, discount_fallback=True)
        assert not (tmp_path / "x.nplm").exists()
    text.seek(0)
    estimate(text, QUERY_MAX_ORDER, binary=str(tmp_path / "top.nplm"), progress=False, discount_fallback=True)
    assert nplm.Model(str(tmp_path / "top.nplm")).order == QUERY_MAX_ORDER


def test_unreadable_inputs(tmp_path):
    with pytest.raises(FileNotFoundError):
        estimate(tmp_path / "missing.txt", 3, progress=False)
    with pytest.raises(IsADirectoryError):
        estimate(tmp_path, 3, progress=False)
    for name, data in (("bad.gz", b"\x1f\x8b\x08garbage"), ("cut.xz", lzma.compress(b"a b c\n" * 99)[:40])):
        with pytest.raises(FormatError, match=f"{name}: corrupt or truncated") as e:
            estimate(write(tmp_path, name, data), 3, progress=False)
        assert str(e.value).count(name) == 1, str(e.value)      # named once
    with pytest.raises(FileNotFoundError):
        estimate(as_text([["a"]]), 1, limit_vocab_file=tmp_path / "nope", progress=False)
    with pytest.raises(FileNotFoundError, match="output"):
        estimate(as_text([["a"]]), 1, arpa=tmp_path / "no" / "such" / "dir.arpa", progress=False)




def test_data_too_small_for_discounts_gives_lmplz_advice(tmp_path):
    path = write(tmp_path, "tiny.txt", b"a b c\n")
    with pytest.raises(DiscountError, match="discount_fallback") as e:
        estimate(path, 3, progress=False)
    assert "Could not calculate Kneser-Ney discounts for 1-grams" in str(e.value)
    with pytest.warns(UserWarning, match="Substituting fallback discounts"):
        t = estimate(path, 3, progress=False, discount_fallback=True)
    assert t.counts == [6, 4, 3]  # <s> <s> a is padding


def test_special_words_in_text(tmp_path):
    path = write(tmp_path, "s.txt", b"a b\nc </s> d\n")
    with pytest.raises(FormatError, match=r"s\.txt:2: special word </s> .*--skip_symbols"):
        estimate(path, 2, progress=False)
    corpus = random_corpus(23, 600, 150)
    dirty = [s[:1] + ["<s>", "<unk>"] + s[1:] + ["</s>"] if s else s for s in corpus]
    with pytest.warns(UserWarning, match="treated as whitespace"):
        skipped = estimate(as_text(dirty), 3, skip_symbols=True, progress=False)
    assert table_entries(skipped) == table_entries(estimate(as_text(corpus), 3, progress=False))


@pytest.mark.parametrize("prune,match", [([0, 2, 1], "non-decreasing"), ([0, 1, 1, 1], "only has order 3"),
                                         ([1], "unigrams cannot be pruned"), ([0, -1], "bad pruning"),
                                         (["x"], "bad pruning")])
def test_bad_prune(prune, match):
    with pytest.raises(ValueError, match=match):
        estimate(as_text([["a"]]), 3, prune=prune, progress=False)


@pytest.mark.parametrize("fallback,match", [((0.5, 1, 1.5, 2), "at most three"), ((1.5,), "not in the range"),
                                            (("x",), "bad fallback")])
def test_bad_fallback(fallback, match):
    with pytest.raises(ValueError, match=match):
        estimate(as_text([["a"]]), 3, discount_fallback=fallback, progress=False)


def test_fallback_pads_with_last_value():
    corpus = random_corpus(9, 40, 6)
    a = estimate(as_text(corpus), 3, discount_fallback=(0.7,), progress=False)
    b = estimate(as_text(corpus), 3, discount_fallback=(0.7, 0.7, 0.7), progress=False)
    assert table_entries(a) == table_entries(b)


def test_vocab_pad_spreads_unigram_mass():
    corpus = random_corpus(24, 600, 150)
    plain = estimate(as_text(corpus), 2, progress=False)
    padded = estimate(as_text(corpus), 2, vocab_pad=1000, progress=False)
    i = plain.vocab.index(UNK)
    # <unk> holds gamma / |V|; padding only changes |V| (which excludes <s>)
    shift = math.log10(1000 / (len(plain.vocab) - 1))
    assert padded.logprob[0][i] == pytest.approx(plain.logprob[0][i] - shift, abs=1e-5)
    with pytest.raises(ValueError, match="interpolate_unigrams"):
        estimate(as_text(corpus), 2, vocab_pad=1000, interpolate_unigrams=False, progress=False)


def test_progress_goes_to_stderr(capsys):
    estimate(as_text(random_corpus(25, 600, 150)), 3)
    err = capsys.readouterr().err
    for stage in ("=== 1/4 Counting", "=== 2/4", "=== 4/4", "Statistics:", "D1="):
        assert stage in err
    # stderr is not a terminal here: the banners and statistics, but no progress bar
    assert "\r" not in err and "*" * 20 not in err and "it/s" not in err


# --------------------------------------------------------------------------- CLI


def test_cli_matches_python_api(tmp_path):
    corpus = random_corpus(26, 600, 150)
    raw = as_text(corpus).getvalue()
    path = write(tmp_path, "c.txt", raw)
    r = estimate_cli("-o", "3", "--prune", "0", "0", "1", "-S", "1G", "-T", str(tmp_path), stdin=raw)
    assert r.returncode == 0, r.stderr.decode()
    assert b"=== 1/5 Counting and sorting n-grams ===" in r.stderr
    expected = table_entries(estimate(path, 3, prune=[0, 0, 1], progress=False))
    assert_same_model(parse_arpa(r.stdout.decode()), expected, tol=1e-6)
    out = tmp_path / "m.arpa"
    r = estimate_cli("-o", "3", "--text", str(path), "--arpa", str(out), "--verbose_header", "-q",
                "--interpolate_unigrams", "0")
    assert r.returncode == 0 and r.stderr == b"", r.stderr.decode()
    text = out.read_text()
    assert text.startswith(f"# Input file: {path}\n# Token count: {sum(map(len, corpus))}\n")
    expected = table_entries(estimate(path, 3, interpolate_unigrams=False, progress=False))
    assert_same_model(parse_arpa(text), expected, tol=1e-6)


def test_cli_errors_are_one_line(tmp_path, capsys, monkeypatch):
    from nplm.cli.main import main
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a\n")))
    for args in (["-o", "0"],
                 ["-o", "3", "--text", str(write(tmp_path, "t.txt", b"a b c\n"))],
                 ["-o", "3", "--prune", "0", "2", "1"],
                 ["-o", "2", "--text", str(write(tmp_path, "u.txt", b"a \xff\n"))]):
        assert main(["estimate", *args, "-q"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("nplm: error:") and err.count("\n") <= 3, err
    # a missing text is a usage error, named with its option (as --limit_vocab_file's)
    with pytest.raises(SystemExit) as e:
        main(["estimate", "-o", "3", "--text", str(tmp_path / "nope"), "-q"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error: argument --text: no such file" in err, err


def test_cli_refuses_to_overwrite_input(tmp_path):
    path = write(tmp_path, "c.txt", as_text(random_corpus(27, 100, 8)).getvalue())
    r = estimate_cli("-o", "2", "--text", str(path), "--arpa", str(path), "-q")
    assert r.returncode == 1 and b"refusing to overwrite" in r.stderr
    assert path.read_bytes() == as_text(random_corpus(27, 100, 8)).getvalue()


def test_binary_output_scores_like_arpa(tmp_path):
    import nplm
    corpus = random_corpus(28, 600, 150)
    path = write(tmp_path, "c.txt", as_text(corpus).getvalue())
    estimate(path, 3, arpa=tmp_path / "m.arpa", binary=tmp_path / "m.nplm", progress=False)
    a = nplm.Model(str(tmp_path / "m.arpa"))
    b = nplm.Model(str(tmp_path / "m.nplm"))
    for s in corpus[:20]:
        assert a.score(" ".join(s)) == pytest.approx(b.score(" ".join(s)), abs=1e-4)


def estimate_cli(*args, stdin=None):
    return run_cli("estimate", *args, stdin=stdin, text=False)
