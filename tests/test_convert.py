"""Format conversions: ARPA <-> nplm back-off binary, ISI NPLM text <-> nplm neural
binary (checked against a numpy forward pass of the toolkit's architecture), and
quantised neural models."""
import math

import numpy as np
import pytest

import nplm
import nplm.neural.network
from nplm import convert
from nplm.backoff import arpa
from nplm.errors import FormatError
from nplm.neural import isi
from nplm.neural import quantized_files as quantize
from nplm.neural.network import NeuralNet

from helpers import REFERENCE, need_shared

LN10 = math.log(10.0)


# ---------------------------------------------------------------------------------
# A hand-made ISI NPLM model and the toolkit's forward pass, written from the format's
# documentation (propagator.h / neuralLM.h), independently of nplm.formats.isi.

def _isi_text(rng, input_words, output_words, n=3, d=4, H=5, r=3, act="rectifier", biases=True):
    m = n - 1
    P = {"E": rng.normal(0, 0.5, (len(input_words), d)), "U2": rng.normal(0, 0.5, (r, H if H else m * d)),
         "W": rng.normal(0, 0.5, (len(output_words), r)), "b": rng.normal(0, 0.5, len(output_words)),
         "c2": rng.normal(0, 0.3, r) if biases else np.zeros(r)}
    if H:
        P["U1"] = rng.normal(0, 0.5, (H, m * d))
        P["c1"] = rng.normal(0, 0.3, H) if biases else np.zeros(H)
    P = {k: np.round(v, 6) for k, v in P.items()}

    def mat(a):
        return "\n".join("\t".join(repr(float(x)) for x in row) for row in np.atleast_2d(a))

    same = input_words == output_words
    lines = ["\\config", "version 1", f"ngram_size {n}"]
    lines += [f"vocab_size {len(input_words)}"] if same else [
        f"input_vocab_size {len(input_words)}", f"output_vocab_size {len(output_words)}"]
    lines += [f"input_embedding_dimension {d}", f"num_hidden {H}", f"output_embedding_dimension {r}",
              f"activation_function {act}", ""]
    if same:
        lines += ["\\vocab"] + input_words + [""]
    else:
        lines += ["\\input_vocab"] + input_words + ["", "\\output_vocab"] + output_words + [""]
    lines += ["\\input_embeddings", mat(P["E"]), ""]
    if H:
        lines += ["\\hidden_weights 1", mat(P["U1"]), ""]
        if biases:
            lines += ["\\hidden_biases 1", mat(P["c1"][:, None]), ""]
    lines += ["\\hidden_weights 2", mat(P["U2"]), ""]
    if biases:
        lines += ["\\hidden_biases 2", mat(P["c2"][:, None]), ""]
    lines += ["\\output_weights", mat(P["W"]), "", "\\output_biases", mat(P["b"][:, None]), "", "\\end", ""]
    return "\n".join(lines), P


def _toolkit_forward(P, ctx_ids, act="rectifier"):
    """Natural-log softmax over the output vocabulary, float64."""
    f = {"rectifier": lambda x: np.maximum(x, 0.0), "tanh": np.tanh, "identity": lambda x: x}[act]
    x = np.concatenate([P["E"][i] for i in ctx_ids])
    h = f(P["U1"] @ x + P["c1"]) if "U1" in P else x
    h = f(P["U2"] @ h + P["c2"])
    s = P["W"] @ h + P["b"]
    return s - (s.max() + np.log(np.exp(s - s.max()).sum()))


WORDS = ["<s>", "</s>", "<null>", "<unk>", "a", "b", "c", "the", "cat"]


@pytest.mark.parametrize("H,act,biases", [(5, "rectifier", False), (5, "tanh", True), (0, "identity", True)])
def test_isi_model_scores_match_the_toolkit_forward_pass(tmp_path, H, act, biases):
    rng = np.random.default_rng(7 + H)
    text, P = _isi_text(rng, WORDS, WORDS, H=H, act=act, biases=biases)
    src = tmp_path / "model.nplm.txt"
    src.write_text(text)
    dst = tmp_path / "model.nplm"
    sf, tf, _ = convert.convert(src, dst, to="neural")
    assert (sf, tf) == ("isi", "neural")
    net = nplm.neural.network.NeuralNet.load(dst)
    vocab = net.vocab
    idx = {w: i for i, w in enumerate(WORDS)}
    predicted = [w for w in WORDS]
    # every context of two input words (the toolkit's ids) ...
    ctxs, words, expect = [], [], []
    for w1 in WORDS:
        for w2 in WORDS:
            if w2 == "<null>":
                continue
            logp = _toolkit_forward(P, [idx[w1], idx[w2]], act)
            # nplm writes a sentence start as <null> <s>; the toolkit as <s> <s>
            c = ["<null>", "<s>"] if (w1, w2) == ("<s>", "<s>") else [w1, w2]
            if c == [w1, w2] and "<null>" in c:
                continue
            for w in predicted:
                ctxs.append([vocab.id(c[0]), vocab.id(c[1])])
                words.append(vocab.id(w))
                expect.append(logp[idx[w]] / LN10)
    got = net.log10_prob(np.array(ctxs, np.int32), np.array(words, np.int32))
    assert np.max(np.abs(got - np.array(expect))) < 2e-5


def test_isi_round_trip_and_separate_vocabularies(tmp_path):
    rng = np.random.default_rng(3)
    inw = ["<s>", "<null>", "<unk>", "a", "b", "the"]
    outw = ["</s>", "<unk>", "a", "b", "c", "the"]
    text, P = _isi_text(rng, inw, outw, biases=True)
    src = tmp_path / "sep.txt"
    src.write_text(text)
    mid = tmp_path / "sep.nplm"
    back = tmp_path / "back.isi"
    convert.convert(src, mid)
    assert convert.detect(mid) == "neural"
    convert.convert(mid, back)
    a, b = isi.read_isi(src), isi.read_isi(back)
    assert a.input_words == b.input_words and a.output_words == b.output_words
    assert a.config == b.config
    for name in a.arrays:
        # nplm keeps float32
        assert np.allclose(a.arrays[name], b.arrays[name], rtol=1e-6, atol=1e-7), name
    # scores over the output vocabulary, contexts of known input words
    net = nplm.neural.network.NeuralNet.load(mid)
    ii = {w: i for i, w in enumerate(inw)}
    for c in (["a", "b"], ["the", "<unk>"], ["b", "zebra"]):
        ref = _toolkit_forward(P, [ii.get(w, ii["<unk>"]) for w in c])
        ctx = np.array([[net.vocab.id(w) for w in c]] * len(outw), np.int32)
        got = net.log10_prob(ctx, np.array([net.vocab.id(w) for w in outw], np.int32))
        assert np.max(np.abs(got - ref / LN10)) < 2e-5
        # words the toolkit cannot predict get probability zero
        p_in_only = net.log10_prob(ctx[:1], np.array([net.vocab.id("<s>")], np.int32))
        assert p_in_only[0] < -1000


def test_isi_errors(tmp_path):
    rng = np.random.default_rng(0)
    text, _ = _isi_text(rng, WORDS, WORDS)
    cases = {
        "hardtanh": (text.replace("activation_function rectifier", "activation_function hardtanh"),
                     r"bad.txt:\d+.*hardtanh"),
        "columns": (text.replace("\\hidden_weights 2\n", "\\hidden_weights 2\n1.0 ", 1), r"bad.txt:\d+.*values"),
        "number": (text.replace("\\output_biases\n", "\\output_biases\nabc\n", 1), r"bad.txt:\d+"),
        "truncated": (text[: text.index("\\output_biases")], r"bad.txt.*\\end|bad.txt.*output_biases"),
        "vocab": (text.replace("vocab_size 9", "vocab_size 10"), r"vocabulary has 9 words"),
    }
    for _name, (bad, pattern) in cases.items():
        p = tmp_path / "bad.txt"
        p.write_text(bad)
        with pytest.raises(FormatError, match=pattern):
            isi.read_isi(p)


# ---------------------------------------------------------------------------------
# Quantisation.

def _random_net(V_words=30, order=4, seed=0, context="full", output="softmax", hidden=(32, 16)):
    from nplm.neural.network import NeuralConfig, NeuralNet
    from nplm.neural.vocab import SPECIALS, Vocabulary
    words = list(SPECIALS) + [f"w{i}" for i in range(V_words)]
    vocab = Vocabulary(words, np.arange(len(words))[::-1] + 1)
    cfg = NeuralConfig(order=order, embedding_dim=16, hidden=hidden, context=context, output=output,
                       activation="relu")
    net = NeuralNet.create(cfg, vocab, seed=seed)
    rng = np.random.default_rng(seed)
    for k, v in net.params.items():   # larger weights than the initialisation: peakier distributions
        if v.size:
            net.params[k] = (v + rng.normal(0, 0.3, v.shape)).astype(np.float32)
    return net


@pytest.mark.parametrize("dtype,tol", [("float16", 5e-3), ("int8", 5e-2)])
def test_quantised_models_score_within_tolerance(tmp_path, dtype, tol):
    net = _random_net()
    src = tmp_path / "net.nplm"
    net.save(src)
    dst = tmp_path / f"net.{dtype}.nplm"
    text = tmp_path / "text.txt"
    rng = np.random.default_rng(1)
    text.write_text("\n".join(" ".join(f"w{i}" for i in rng.integers(0, 30, 12)) for _ in range(40)) + "\n")
    sf, tf, report = convert.convert(src, dst, to=dtype, text=text)
    assert (sf, tf) == ("neural", dtype) and convert.detect(dst) == dtype
    assert report["bytes_after"] < report["bytes_before"]
    from nplm.io import container

    def weight_bytes(path):
        return sum(a.nbytes for n, a in container.read(path).arrays.items() if n.startswith(("param.", "qscale.")))
    assert weight_bytes(dst) < weight_bytes(src) * (0.52 if dtype == "float16" else 0.35)
    q = NeuralNet.load(dst)
    V = len(net.vocab)
    ctx = rng.integers(0, V, size=(200, 3)).astype(np.int32)
    d0 = net.log10_distribution(ctx)
    d1 = q.log10_distribution(ctx)
    assert np.max(np.abs(d0 - d1)) < tol
    assert np.max(np.abs(d0 - d1)) > 0            # it really was quantised
    assert np.allclose(np.sum(10.0 ** d1.astype(np.float64), axis=1), 1.0, atol=1e-4)
    assert abs(report["perplexity_change"]) < (0.01 if dtype == "float16" else 0.05)
    # back to float32: the dequantised values, now a plain model
    f32 = tmp_path / "back.nplm"
    convert.convert(dst, f32, to="neural")
    assert convert.detect(f32) == "neural"
    back = nplm.neural.network.NeuralNet.load(f32)
    assert np.array_equal(back.log10_distribution(ctx), d1)


def test_quantised_int8_is_per_row_symmetric():
    a = np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [3.0, 2.0, -1.5]], np.float32)
    arrays, names = quantize.quantize_params({"emb": a, "b0": np.ones(3, np.float32)}, "int8")
    assert names == ["emb"] and arrays["param.b0"].dtype == np.float32
    q, s = arrays["param.emb"], arrays["qscale.emb"]
    assert q.dtype == np.int8 and np.array_equal(np.abs(q).max(axis=1), [127, 0, 127])
    assert np.allclose(q * s[:, None], a, atol=np.abs(a).max(axis=1, keepdims=True) / 254 + 1e-7)


def test_unsupported_isi_architectures_are_refused(tmp_path):
    net = _random_net(context="diagonal")
    with pytest.raises(ValueError, match="ISI NPLM format holds"):
        isi.from_neural(net)


@pytest.mark.parametrize("order,hidden", [(4, (32, 16)), (3, (16,)), (2, (32, 16))])
def test_nplm_isi_nplm_is_lossless_and_the_toolkit_scores_like_nplm(tmp_path, order, hidden):
    """nplm pads a sentence start '<null> ... <s>', the toolkit '<s> ... <s>': from order 3
    on the ISI file carries one more embedding dimension so that the toolkit's forward
    pass (written from its documentation, above) scores sentences and <null>-padded
    contexts as nplm does; converting back removes it and gives the same weights."""
    net = _random_net(order=order, hidden=hidden, seed=order)
    assert not np.array_equal(net.params["emb"][1], net.params["emb"][3])     # <s> and <null> differ
    src, mid, back, again = (tmp_path / n for n in ("m.nplm", "m.isi", "back.nplm", "again.isi"))
    net.save(src)
    said = []
    assert convert.convert(src, mid, messages=said.append)[:2] == ("neural", "isi")
    f = isi.read_isi(mid)
    extra = order > 2
    assert f.config["input_embedding_dimension"] == 16 + extra
    assert [m.split(":")[0] for m in said] == (["note"] if extra else []), said
    a = f.arrays
    P = {"E": a["input_embeddings"], "W": a["output_weights"], "b": a["output_biases"]}
    if f.config["num_hidden"]:
        P.update(U1=a["hidden_weights_1"], c1=a["hidden_biases_1"])
    P.update(U2=a["hidden_weights_2"], c2=a["hidden_biases_2"])
    ti = {w: i for i, w in enumerate(f.input_words)}
    to = {w: i for i, w in enumerate(f.output_words)}
    m = order - 1
    model = nplm.Model(str(src))
    for sentence in ("w1 w2 w3", "w4", "", "w5 w1 w1 w7 w2"):
        words = sentence.split() + ["</s>"]
        ids = [ti["<s>"]] * m + [ti[w] for w in words]
        total = sum(_toolkit_forward(P, ids[j - m:j])[to[w]] for j, w in zip(range(m, len(ids)), words))
        assert abs(model.score(sentence) - total / LN10) < 1e-4, sentence
    for ctx in (["<null>"] * (m - 1) + ["w3"], ["<null>"] * m):
        ref = _toolkit_forward(P, [ti[w] for w in ctx])
        got = net.log10_distribution(np.array([[net.vocab.id(w) for w in ctx]], np.int32))[0]
        assert np.max(np.abs(got[[net.vocab.id(w) for w in f.output_words]] - ref / LN10)) < 1e-5
    # back: the same weights, bit for bit; and again to ISI: the same file
    _, _, report = convert.convert(mid, back, text=_write_text(tmp_path))
    assert report["perplexity_before"] == report["perplexity_after"]
    b = nplm.neural.network.NeuralNet.load(back)
    assert b.vocab.words == net.vocab.words and b.config.embedding_dim == 16
    for k in net.params:
        assert np.array_equal(b.params[k], net.params[k]), k
    convert.convert(back, again, messages=said.append)
    assert again.read_bytes() == mid.read_bytes()
    # --text with an ISI output: the file read back, scored as nplm reads it
    _, _, report = convert.convert(src, tmp_path / "t.isi", text=_write_text(tmp_path), messages=said.append)
    assert report["perplexity_after"] == pytest.approx(report["perplexity_before"], rel=1e-6)


def _write_text(tmp_path):
    t = tmp_path / "valid.txt"
    t.write_text("w1 w2 w3 w4\nw5 w6 zebra\n\nw7\n")
    return t


def test_a_genuine_toolkit_file_keeps_its_dimension(tmp_path):
    """The sentence-start dimension is recognised by its pattern and weights, not by
    its place: a toolkit file whose last embedding column happens to be 0/1 with <s> at
    1 but whose weights do not match keeps every dimension."""
    rng = np.random.default_rng(5)
    text, P = _isi_text(rng, WORDS, WORDS, n=3, d=4, H=5)
    f = isi.read_isi(_write_file(tmp_path, "a.isi", text))
    f.arrays["input_embeddings"][:, -1] = 0
    f.arrays["input_embeddings"][WORDS.index("<s>"), -1] = 1
    isi.write_isi(f, tmp_path / "b.isi")
    net = isi.to_neural(isi.read_isi(tmp_path / "b.isi"))[0]
    assert net.config.embedding_dim == 4


def _write_file(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_text_is_refused_where_there_is_nothing_to_measure(tmp_path):
    src = _write_file(tmp_path, "x.arpa", "\\data\\\nngram 1=3\n\n\\1-grams:\n-1\t<s>\n-0.5\t</s>\n-0.5\ta\n\n\\end\\\n")
    with pytest.raises(ValueError, match="nothing to measure"):
        convert.convert(src, tmp_path / "x.nplm", text=_write_text(tmp_path))
    assert not (tmp_path / "x.nplm").exists()


# ---------------------------------------------------------------------------------
# Back-off tables.

def _same_tables(a, b):
    assert a.vocab == b.vocab and a.counts == b.counts
    for k in range(a.order):
        da = {tuple(r): (p, q) for r, p, q in zip(a.ids[k].tolist(), a.logprob[k].tolist(), a.backoff[k].tolist())}
        db = {tuple(r): (p, q) for r, p, q in zip(b.ids[k].tolist(), b.logprob[k].tolist(), b.backoff[k].tolist())}
        assert da == db


def test_arpa_binary_arpa_round_trip(tmp_path):
    need_shared()
    src = REFERENCE / "tiny200.o4.discount-fallback.arpa.xz"
    binf = tmp_path / "t.nplm"
    back = tmp_path / "t.arpa.gz"
    assert convert.convert(src, binf)[:2] == ("arpa", "binary")
    assert convert.convert(binf, back)[:2] == ("binary", "arpa")
    _same_tables(arpa.read_arpa(back), arpa.read_arpa(src))
    # unknown words are <unk> in both, and kenlm agrees with the round-tripped file
    kenlm = pytest.importorskip("kenlm")
    k1, k2 = kenlm.Model(str(src)), kenlm.Model(str(back))
    for line in (REFERENCE / "tiny200.txt").read_text().splitlines()[:30] + ["zebra crossing the UNK"]:
        assert abs(k1.score(line) - k2.score(line)) < 1e-4


def test_pruned_binary_to_arpa_scores_the_same(tmp_path):
    need_shared()
    src = REFERENCE / "ptb5k.o4.prune011.arpa.xz"
    binf = tmp_path / "p.nplm"
    back = tmp_path / "p.arpa"
    convert.convert(src, binf)
    convert.convert(binf, back)
    orig, got = arpa.read_arpa(src), arpa.read_arpa(back)
    # every original n-gram is there with its values; extra ones are KenLM's blanks
    for k in range(orig.order):
        dg = {tuple(r): p for r, p in zip(got.ids[k].tolist(), got.logprob[k].tolist())}
        for r, p in zip(orig.ids[k].tolist(), orig.logprob[k].tolist()):
            assert dg[tuple(r)] == p
    m1, m2 = nplm.Model(str(src)), nplm.Model(str(back))
    for line in (REFERENCE / "ptb5k.txt").read_text().splitlines()[:100]:
        assert abs(m1.score(line) - m2.score(line)) < 1e-4


def test_refuses_to_overwrite_input_and_mismatched_kinds(tmp_path):
    need_shared()
    src = tmp_path / "m.arpa"
    src.write_bytes(__import__("lzma").open(REFERENCE / "tiny200.o4.discount-fallback.arpa.xz").read())
    before = src.read_bytes()
    with pytest.raises(ValueError, match="refusing to overwrite"):
        convert.convert(src, src, to="arpa")
    assert src.read_bytes() == before
    with pytest.raises(ValueError, match="cannot become a neural network"):
        convert.convert(src, tmp_path / "x.nplm", to="neural")
    bad = tmp_path / "junk.txt"
    bad.write_text("hello\n")
    with pytest.raises(FormatError, match="junk.txt"):
        convert.convert(bad, tmp_path / "y.nplm")
    assert not (tmp_path / "y.nplm").exists()


def test_cli_convert(tmp_path, capsys):
    from nplm.cli.main import main
    net = _random_net()
    src = tmp_path / "n.nplm"
    net.save(src)
    text = tmp_path / "t.txt"
    text.write_text("w1 w2 w3 w4\nw5 w6\n")
    assert main(["convert", str(src), str(tmp_path / "q.nplm"), "--to", "int8", "--text", str(text)]) == 0
    err = capsys.readouterr().err
    assert "neural -> int8" in err and "perplexity" in err
    assert main(["convert", str(src), str(src), "--to", "float16"]) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    # an ISI output: the extra sentence-start dimension is announced, --text measured
    assert main(["convert", str(src), str(tmp_path / "n.isi"), "--text", str(text)]) == 0
    err = capsys.readouterr().err
    assert "nplm: note: the ISI file has input_embedding_dimension 17" in err and "perplexity" in err


@pytest.mark.parametrize("normalization", [None, "unnormalized"])
def test_converted_isi_model_scores_sentences_like_the_toolkit(tmp_path, normalization):
    """nplm.Model on the converted file: a sentence's score is the toolkit's sum over
    its n-grams (contexts padded with <s>, as testNeuralLM does), natural log -> log10;
    'unnormalized' is the toolkit's default self-normalised lookup."""
    rng = np.random.default_rng(11)
    text, P = _isi_text(rng, WORDS, WORDS, n=4, H=6)
    src = tmp_path / "m.txt"
    src.write_text(text)
    dst = tmp_path / "m.nplm"
    convert.convert(src, dst)
    model = nplm.Model(str(dst), normalization=normalization)
    idx = {w: i for i, w in enumerate(WORDS)}

    def toolkit(sentence):
        ids = [idx["<s>"]] * 3 + [idx.get(w, idx["<unk>"]) for w in sentence.split()] + [idx["</s>"]]
        total = 0.0
        for j in range(3, len(ids)):
            x = np.concatenate([P["E"][i] for i in ids[j - 3:j]])
            h = np.maximum(P["U2"] @ np.maximum(P["U1"] @ x + P["c1"], 0) + P["c2"], 0)
            s = P["W"] @ h + P["b"]
            if normalization is None:
                s = s - (s.max() + np.log(np.exp(s - s.max()).sum()))
            total += s[ids[j]]
        return total / LN10

    for sentence in ("a b c", "the cat", "c", "the zebra a the cat b"):
        assert abs(model.score(sentence) - toolkit(sentence)) < 1e-4, sentence


@pytest.mark.parametrize("damage,message", [
    (("float16", "param.emb", lambda a: a.astype(np.float32)), "'emb' should be float16"),
    (("float16", "param.out_b", lambda a: a.astype(np.float64)), "'out_b' has shape .* float64"),
    (("int8", "qscale.out_w", None), "'out_w': int8 values or their row scales are malformed"),
])
def test_damaged_quantised_files_are_refused_when_loaded(tmp_path, damage, message):
    """A quantised model's arrays are checked when it is loaded, also where their
    float32 values are made only when first used (nplm.Model), naming the array."""
    from nplm.io import container
    from nplm.neural.network import KIND
    dtype, key, change = damage
    src, dst, bad = tmp_path / "net.nplm", tmp_path / "q.nplm", tmp_path / "bad.nplm"
    _random_net().save(src)
    quantize.quantize_file(src, dst, dtype)
    c = container.read(dst)
    arrays = dict(c.arrays)
    if change is None:
        del arrays[key]
    else:
        arrays[key] = change(arrays[key])
    container.write(bad, KIND, c.config, arrays)
    with pytest.raises(nplm.ModelLoadError, match=message):
        nplm.Model(str(bad))
    with pytest.raises(nplm.FormatError, match=message):
        NeuralNet.load(bad)


def test_isi_output_warns_about_the_normalisers_it_leaves_out(tmp_path):
    from nplm.neural.query import precompute
    src = tmp_path / "n.nplm"
    _random_net(order=3).save(src)
    text = _write_text(tmp_path)
    precompute(str(src), str(text), min_count=1, progress=False)
    said = []
    convert.convert(src, tmp_path / "n.isi", messages=said.append)
    assert any(m.startswith("warning: the precomputed normalisers") for m in said), said
    with pytest.warns(UserWarning, match="precomputed normalisers"):       # no listener: Python warnings
        convert.convert(src, tmp_path / "m.isi")


@pytest.mark.parametrize("dtype", ["float16", "int8"])
def test_quantising_drops_stale_fallback_normalisers(tmp_path, dtype):
    """Fallback tables hold the normalisers of the float32 weights: a quantised copy
    must not keep them (its fallback distribution would not sum to 1).  It leaves them
    out with a warning naming `nplm precompute`, and fallback mode then refuses to load
    until they are computed again; a fresh precompute normalises the quantised model."""
    from nplm.neural.query import precompute
    src, dst = tmp_path / "n.nplm", tmp_path / f"q.{dtype}.nplm"
    _random_net(order=3).save(src)
    text = _write_text(tmp_path)
    precompute(str(src), str(text), min_count=1, progress=False)
    said = []
    convert.convert(src, dst, to=dtype, messages=said.append)
    assert any("fallback normaliser tables" in m and "nplm precompute" in m for m in said), said
    with pytest.raises(nplm.ModelLoadError, match="precompute"):
        nplm.Model(str(dst), normalization="fallback")
    with pytest.warns(UserWarning, match="nplm precompute"):          # no listener: Python warnings
        convert.convert(src, tmp_path / "p.nplm", to=dtype)
    precompute(str(dst), str(text), min_count=1, progress=False)
    fb, ex = (nplm.Model(str(dst), normalization=n) for n in ("fallback", "exact"))
    for ctx in ("<s>", "<s> w1", "w5 w6"):       # contexts the text holds: fallback is exact there
        states = []
        for m in (fb, ex):
            state = nplm.State()
            words = ctx.split()
            m.BeginSentenceWrite(state) if words[0] == "<s>" else m.NullContextWrite(state)
            for w in words[1:] if words[0] == "<s>" else words:
                nxt = nplm.State()
                m.BaseScore(state, w, nxt)
                state = nxt
            states.append(m.log10_distribution(state))
        np.testing.assert_allclose(states[0], states[1], atol=1e-5, err_msg=ctx)


def test_dequantising_keeps_normalisers_that_still_match(tmp_path):
    """float16 -> float32 keeps the same weight values, so its tables stay: they equal
    a fresh precompute of the float32 copy."""
    from nplm.io import container
    from nplm.neural.query import precompute
    src, f16, f32 = tmp_path / "n.nplm", tmp_path / "h.nplm", tmp_path / "f.nplm"
    _random_net(order=3).save(src)
    text = _write_text(tmp_path)
    quantize.quantize_file(src, f16, "float16")
    precompute(str(f16), str(text), min_count=1, progress=False)
    said = []
    convert.convert(f16, f32, to="neural", messages=said.append)
    assert not said
    kept = {k: np.array(v) for k, v in container.read(f32).arrays.items() if k.startswith("fallback.")}
    assert kept
    precompute(str(f32), str(text), min_count=1, progress=False)
    fresh = container.read(f32).arrays
    for k, v in kept.items():
        np.testing.assert_array_equal(v, fresh[k])
