"""N-best rescoring: every added feature is the model's own score(hypothesis) (a
back-off, a neural and an interpolated model, KenLM's binaries; Moses and plain
lists; log10 and ln; words of every length between every delimiter), the rest of
each line is kept byte for byte, re-ranking picks the weighted arg-max (checked by
brute force), and malformed lists are errors naming file and line."""
import gzip
import lzma
import math
import random
import re

import numpy as np
import pytest

import nplm
from nplm.cli.main import main as cli_main
from nplm.compose._rescore import SharedScorer, scan
from nplm.errors import FormatError

from helpers import REFERENCE, WORDS, make_net, need_shared, quiet_config

PTB_WORDS = ("the company said it expects to report a loss UNK shares rose N cents of new year "
             "stock market fell sharply in million").split()
# PTB words, the network's words, words no model knows, and a non-ASCII one
POOL = PTB_WORDS + WORDS[4:20] + ["zzqx", "naïve", "日本"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    need_shared()
    tmp = tmp_path_factory.mktemp("rescore")
    backoff = nplm.Model(str(REFERENCE / "ptb5k.o3.arpa.xz"), quiet_config())
    path = str(tmp / "net.nplm")
    make_net("class-full-1", order=4, seed=3).save(path)
    neural = nplm.Model(path)
    mix = nplm.interpolate([backoff, neural], [0.7, 0.3])
    return [backoff, neural, mix]


def _hypotheses(n_ids, per_id, seed=0):
    rng = random.Random(seed)
    out = []
    for i in range(n_ids):
        for _ in range(per_id):
            words = [rng.choice(POOL) for _ in range(rng.randrange(0, 12))]
            out.append((str(i), words))
    return out


def _moses_list(hyps, seed=0):
    """Lines as decoders write them, with the quirks a reader must keep: two spaces
    after the hypothesis, old 'name:' features, an alignment field, a CRLF line and a
    last line without a newline."""
    rng = random.Random(seed)
    lines = []
    for k, (sid, words) in enumerate(hyps):
        feats = f"Distortion0= {rng.uniform(-5, 0):.3f} TM0= {rng.uniform(-9, 0):.4f} {rng.uniform(-9, 0):.2f}"
        if k % 7 == 3:
            feats = f"d: {rng.randrange(-4, 1)} tm: -1.5 -2"
        hyp = "  ".join(words) if k % 5 == 1 else " ".join(words)
        lines.append(f"{sid} ||| {hyp}  ||| {feats} ||| {rng.uniform(-30, 0):.4f} ||| 0-0 1-1"
                     + ("\r\n" if k == 4 else "\n"))
    lines[-1] = lines[-1].rstrip("\n")
    return "".join(lines).encode("utf-8")


def _plain_list(hyps, seed=0):
    rng = random.Random(seed)
    lines = [f"{sid}\t{' '.join(words)}\t{rng.uniform(-9, 0):.3f}\t{rng.randrange(5)}\n"
             for sid, words in hyps]
    return "".join(lines).encode("utf-8")


NAMES = ["KN", "NN", "MIX"]
KINDS = ["backoff", "neural", "mixture"]


def _split_moses_output(line, names):
    """(the line without the added features, their values as text)."""
    fields = line.split(b"|||")
    m = re.search(rb" " + rb" ".join(n.encode() + rb"= (\S+)" for n in names) + rb"(\s*)$", fields[2])
    assert m, line
    fields[2] = fields[2][:m.start()] + m.group(len(names) + 1)
    return b"|||".join(fields), [v.decode() for v in m.groups()[:len(names)]]


def _split_plain_output(line, n):
    body = line.rstrip(b"\r\n")
    ending = line[len(body):]
    parts = body.split(b"\t")
    return b"\t".join(parts[:-n]) + ending, [v.decode() for v in parts[-n:]]


@pytest.mark.parametrize("fmt", ["moses", "plain"])
@pytest.mark.parametrize("base", ["10", "e"])
def test_each_feature_is_the_models_score_and_the_rest_is_kept(models, tmp_path, fmt, base):
    hyps = _hypotheses(6, 9)
    data = _moses_list(hyps) if fmt == "moses" else _plain_list(hyps)
    src = tmp_path / "list.txt"
    src.write_bytes(data)
    out = tmp_path / "out.txt"
    res = nplm.rescore(str(src), models, str(out), names=NAMES, base=base)
    assert (res.hypotheses, res.sentences, res.format) == (len(hyps), 6, fmt)
    scale = 1.0 if base == "10" else math.log(10.0)
    got = out.read_bytes().splitlines(keepends=True)
    want = data.splitlines(keepends=True)
    assert len(got) == len(want)
    for (_, words), line, orig in zip(hyps, got, want):
        kept, values = (_split_moses_output(line, NAMES) if fmt == "moses"
                        else _split_plain_output(line, len(NAMES)))
        assert kept == orig
        text = " ".join(words)
        for kind, model, v in zip(KINDS, models, values):
            assert np.float32(v) == np.float32(model.score(text) * scale), (kind, text, v)


def test_batches_and_compression_change_nothing(models, tmp_path):
    hyps = _hypotheses(5, 7, seed=2)
    data = _moses_list(hyps, seed=2)
    (tmp_path / "a").write_bytes(data)
    with gzip.open(tmp_path / "a.gz", "wb") as f:
        f.write(data)
    outs = []
    for src, batch, threads in (("a", 4096, None), ("a", 3, None), ("a.gz", 1, None), ("a", 4096, 2)):
        out = tmp_path / f"out{len(outs)}"
        nplm.rescore(str(tmp_path / src), models, str(out), batch=batch, threads=threads)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2] == outs[3]


def test_features_from_model_paths_equal_those_from_loaded_models(models, reference_binaries, tmp_path):
    hyps = _hypotheses(3, 4, seed=5)
    (tmp_path / "l").write_bytes(_plain_list(hyps))
    nplm.rescore(str(tmp_path / "l"), [reference_binaries["ptb5k.o3"]], str(tmp_path / "o"))
    for (_, words), line in zip(hyps, (tmp_path / "o").read_bytes().splitlines()):
        assert np.float32(line.split(b"\t")[-1].decode()) == np.float32(models[0].score(" ".join(words)))


def _brute_force_best(hyps, data, models, weights, fmt):
    """The first hypothesis of highest weighted score per id, in Python."""
    best = {}
    order = []
    for (sid, words), line in zip(hyps, data.decode("utf-8").splitlines()):
        if fmt == "moses":
            toks = line.split("|||")[2].split()
            groups, vals = [], []
            for t in toks:
                if t.endswith(("=", ":")):
                    groups.append(t[:-1])
                else:
                    vals.append((groups[-1], float(t)))
            w_of = {}
            feats = []
            for g, v in vals:
                w_of[g] = w_of.get(g, -1) + 1
                feats.append(weights[g][w_of[g]] * v)
            feats += [weights[n][0] * m.score(" ".join(words)) for n, m in zip(NAMES, models)]
        else:
            own = [float(x) for x in line.split("\t")[2:]]
            vals = own + [m.score(" ".join(words)) for m in models]
            feats = [w * v for w, v in zip(weights, vals)]
        score = sum(feats)
        if sid not in best:
            order.append(sid)
            best[sid] = (score, words)
        elif score > best[sid][0]:
            best[sid] = (score, words)
    return [" ".join(best[s][1]) for s in order]


@pytest.mark.parametrize("fmt", ["moses", "plain"])
def test_reranking_picks_the_weighted_arg_max(models, tmp_path, fmt):
    hyps = _hypotheses(8, 10, seed=7)
    data = _moses_list(hyps, seed=7) if fmt == "moses" else _plain_list(hyps, seed=7)
    src = tmp_path / "list"
    src.write_bytes(data)
    if fmt == "moses":
        weights = {"Distortion0": [0.3], "TM0": [0.2, 0.1], "d": [0.5], "tm": [0.05, 0.4],
                   "KN": [1.0], "NN": [0.4], "MIX": [0.2]}
        given = ("Distortion0= 0.3 TM0= 0.2 0.1 d: 0.5 tm= 0.05 0.4 KN= 1 NN= 0.4 MIX= 0.2")
    else:
        weights = [0.5, -0.3, 1.0, 0.4, 0.2]
        given = weights
    out = tmp_path / "best"
    nbest_out = tmp_path / "list.out"
    nplm.rescore(str(src), models, str(out), names=NAMES, weights=given, nbest_out=str(nbest_out))
    want = _brute_force_best(hyps, data, models, weights, fmt)
    got = [line.decode("utf-8") for line in out.read_bytes().split(b"\n")[:-1]]
    assert [" ".join(g.split()) for g in got] == want
    # the weights change the choice somewhere (the test would pass trivially otherwise)
    firsts = [" ".join(w) for k, (_, w) in enumerate(hyps) if k % 10 == 0]
    assert got != firsts
    # the full list went to nbest_out, as without weights
    plain_out = tmp_path / "plain.out"
    nplm.rescore(str(src), models, str(plain_out), names=NAMES)
    assert nbest_out.read_bytes() == plain_out.read_bytes()


def test_weights_from_a_moses_ini_section(models, tmp_path):
    hyps = _hypotheses(4, 6, seed=9)
    data = "".join(f"{sid} ||| {' '.join(w)} ||| F0= {k % 3} ||| 0\n" for k, (sid, w) in enumerate(hyps))
    (tmp_path / "l").write_text(data)
    (tmp_path / "moses.ini").write_text("[weight]\n# tuned\nF0= -2\nLM0= 1.5\n")
    nplm.rescore(str(tmp_path / "l"), models[:1], str(tmp_path / "a"), weights=str(tmp_path / "moses.ini"))
    nplm.rescore(str(tmp_path / "l"), models[:1], str(tmp_path / "b"), weights={"F0": -2, "LM0": 1.5})
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


BAD = [
    ("moses", b"0 ||| a b ||| F= 1 ||| -1\n0 ||| a c ||| F= 1 ||| -2\n1 a b F= 1 -1\n", 3, "not a Moses"),
    ("moses", b"0 ||| a b ||| F= 1 ||| -1\n ||| a c ||| F= 1 ||| -2\n", 2, "no sentence id"),
    ("moses", b"0 ||| a b ||| F= 1 ||| -1\n0 ||| a ||| F= 1 ||| -2 ||| 0-0\n", 2, "5 fields where line 1 has 4"),
    ("moses", b"0 ||| a b ||| F= 1 ||| -1\n\n1 ||| a ||| F= 1 ||| -2\n", 2, "empty line"),
    ("plain", b"0\ta b\t-1\n1 a b -2\n", 2, "not a plain n-best line"),
    ("plain", b"0\ta b\t-1\n1\ta b\n", 2, "2 fields where line 1 has 3"),
    ("plain", b"0\ta b\t-1\n\tb\t-3\n", 2, "no sentence id"),
]


@pytest.mark.parametrize("fmt,data,line,message", BAD)
def test_malformed_lists_name_file_and_line(models, tmp_path, fmt, data, line, message):
    src = tmp_path / "bad.nbest"
    src.write_bytes(data)
    with pytest.raises(FormatError, match=re.escape(message)) as e:
        nplm.rescore(str(src), models[:1], str(tmp_path / "out"), fmt="auto")
    assert str(e.value).startswith(f"{src}:{line}: ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("data,weights,message", [
    (b"0 ||| a ||| F= 1 ||| 0\n0 ||| b ||| F= x ||| 0\n", "F= 1 LM0= 1", ":2: feature value 'x' is not a number"),
    (b"0 ||| a ||| F= 1 ||| 0\n1 ||| b ||| F= 1 ||| 0\n0 ||| c ||| F= 1 ||| 0\n", "F= 1 LM0= 1",
     ":3: sentence id '0' appears again"),
    (b"0 ||| a ||| F= 1 ||| 0\n", "G= 1 LM0= 1", "no weight for feature 'F' (line 1"),
    (b"0 ||| a ||| F= 1 2 ||| 0\n", "F= 1 LM0= 1", "feature 'F' has 2 value(s) on line 1"),
    (b"0\ta\t1\n", "1 2 3", "3 weights for 2 feature values"),
])
def test_bad_weights_or_lists_for_reranking(models, tmp_path, data, weights, message):
    src = tmp_path / "l"
    src.write_bytes(data)
    with pytest.raises(ValueError, match=re.escape(message)):
        nplm.rescore(str(src), models[:1], str(tmp_path / "out"), weights=weights)


def test_a_name_the_list_already_has_is_refused(models, tmp_path):
    (tmp_path / "l").write_bytes(b"0 ||| a ||| LM0= -3 ||| 0\n")
    with pytest.raises(ValueError, match="already has feature"):
        nplm.rescore(str(tmp_path / "l"), models[:1], str(tmp_path / "out"))


def test_cli_adds_features_and_reranks(models, reference_binaries, tmp_path, capsys):
    hyps = _hypotheses(3, 5, seed=11)
    data = _moses_list(hyps, seed=11)
    (tmp_path / "l").write_bytes(data)
    model = reference_binaries["ptb5k.o3"]
    assert cli_main(["rescore", model, "--nbest", str(tmp_path / "l"), "-o", str(tmp_path / "o"),
                     "--name", "KN", "-q"]) == 0
    nplm.rescore(str(tmp_path / "l"), [models[0]], str(tmp_path / "ref"), names=["KN"])
    assert (tmp_path / "o").read_bytes() == (tmp_path / "ref").read_bytes()
    assert cli_main(["rescore", model, "--nbest", str(tmp_path / "l"), "-o", str(tmp_path / "best"),
                     "--weights", "Distortion0= 0 TM0= 0 0 d= 0 tm= 0 0 LM0= 1", "-q"]) == 0
    best = (tmp_path / "best").read_text(encoding="utf-8").splitlines()
    want = []
    for sid in ("0", "1", "2"):
        group = [" ".join(w) for s, w in hyps if s == sid]
        want.append(max(group, key=lambda h: (models[0].score(h), -group.index(h))))
    assert [" ".join(b.split()) for b in best] == want
    (tmp_path / "bad").write_bytes(b"0 ||| a ||| F= 1 ||| 0\nbroken line\n")
    assert cli_main(["rescore", model, "--nbest", str(tmp_path / "bad"), "-q"]) == 1
    assert f"{tmp_path / 'bad'}:2: not a Moses n-best line" in capsys.readouterr().err


def _edited_lists(seed, n_ids=5, per_id=40):
    """Lists whose hypotheses differ by a few edits (as real n-best lists do), with
    exact duplicates: the prefixes and suffixes the scorer shares."""
    rng = random.Random(seed)
    hyps = []
    for i in range(n_ids):
        base = [rng.choice(POOL) for _ in range(rng.randrange(3, 15))]
        for _ in range(per_id):
            words = list(base)
            for _ in range(rng.randrange(0, 3)):
                op = rng.random()
                pos = rng.randrange(len(words) + 1)
                if op < 0.5 and pos < len(words):
                    words[pos] = rng.choice(POOL)
                elif op < 0.75 and pos < len(words):
                    del words[pos]
                else:
                    words.insert(pos, rng.choice(POOL))
            hyps.append((str(i), words))
    return hyps


def _transitions(model, groups, bos, eos):
    """How many distinct (state, word) transitions each group of hypotheses takes,
    walked through the kenlm API's BaseScore (the model calls the scorer must make)."""
    total = 0
    for group in groups:
        seen = set()
        for words in group:
            state, out = nplm.State(), nplm.State()
            (model.BeginSentenceWrite if bos else model.NullContextWrite)(state)
            for w in list(words) + (["</s>"] if eos else []):
                model.BaseScore(state, w, out)
                seen.add((state, w))
                state, out = out, nplm.State()
        total += len(seen)
    return total


@pytest.mark.parametrize("bos,eos", [(True, True), (False, True), (True, False), (False, False)])
def test_shared_scorer_equals_score_bit_for_bit_and_shares_work(models, bos, eos):
    hyps = _edited_lists(3)
    data = "".join(f"{sid} ||| {' '.join(w)} ||| F= 0 ||| 0\n" for sid, w in hyps).encode()
    starts, a, b, ins, groups = scan(data, 0, 0, None)[:5]
    assert groups.tolist() == [0, 40, 80, 120, 160, 200]
    by_id = [[w for _, w in hyps[i:i + 40]] for i in range(0, 200, 40)]
    for model in (models[0], models[2]):
        sc = SharedScorer(model.core, model.vocab, bos, eos)
        got = sc.score(data, a, b, groups)
        want = [model.score(" ".join(w), bos=bos, eos=eos) for _, w in hyps]
        assert got.tolist() == want
        words = sum(len(w) + eos for _, w in hyps)
        assert sc.lookups == _transitions(model, by_id, bos, eos) < words / 2, (sc.lookups, words)
        # one group per line: nothing shared between lines, the same totals
        sc = SharedScorer(model.core, model.vocab, bos, eos)
        assert sc.score(data, a, b, np.arange(len(hyps) + 1, dtype=np.int64)).tolist() == want
        assert sc.lookups == _transitions(model, [[w] for _, w in hyps], bos, eos) > words * 0.95


def test_cli_nbest_out_plain_lists_and_refusals(models, reference_binaries, tmp_path, capsys):
    hyps = _hypotheses(3, 4, seed=13)
    src = tmp_path / "l.tsv"
    src.write_bytes(_plain_list(hyps, seed=13))
    model = reference_binaries["ptb5k.o3"]
    args = ["rescore", model, "--nbest", str(src), "--base", "e", "-q"]
    assert cli_main(args + ["-o", str(tmp_path / "feat")]) == 0
    assert cli_main(args + ["-o", str(tmp_path / "best"), "--weights", "0 0 1",
                            "--nbest-out", str(tmp_path / "feat2")]) == 0
    assert (tmp_path / "feat").read_bytes() == (tmp_path / "feat2").read_bytes()
    for (_, words), line in zip(hyps, (tmp_path / "feat").read_bytes().splitlines()):
        want = np.float32(models[0].score(" ".join(words)) * math.log(10.0))
        assert np.float32(line.split(b"\t")[-1].decode()) == want
    assert len((tmp_path / "best").read_bytes().splitlines()) == 3
    assert cli_main(args + ["-o", str(src)]) == 1
    assert "refusing to overwrite the n-best list" in capsys.readouterr().err
    assert cli_main(args + ["--nbest-out", str(tmp_path / "x")]) == 1
    assert "--nbest-out goes with --weights" in capsys.readouterr().err


def test_no_progress_bar_off_a_terminal(models, tmp_path, capsys):
    (tmp_path / "l").write_bytes(_plain_list(_hypotheses(2, 3)))
    nplm.rescore(str(tmp_path / "l"), models[:1], str(tmp_path / "o"))
    assert capsys.readouterr().err == ""


def test_an_error_after_many_chunks_names_its_line(models, tmp_path):
    lines = [f"{i // 4} ||| w{i % 7} the ||| F= 1 ||| 0\n" for i in range(60)]
    lines[47] = "11 ||| the company ||| F= 1\n"
    (tmp_path / "l").write_text("".join(lines))
    with pytest.raises(FormatError) as e:
        nplm.rescore(str(tmp_path / "l"), models[:1], str(tmp_path / "out"), batch=1)
    assert str(e.value).startswith(f"{tmp_path / 'l'}:48: not a Moses n-best line")
    assert not (tmp_path / "out").exists()


def test_a_line_longer_than_a_chunk(models, tmp_path):
    words = [POOL[i % len(POOL)] for i in range(3000)]
    data = f"0 ||| a b ||| F= 1 ||| 0\n1 ||| {' '.join(words)} ||| F= 2 ||| 0\n2 ||| c ||| F= 3 ||| 0"
    (tmp_path / "l").write_text(data)
    nplm.rescore(str(tmp_path / "l"), models[:1], str(tmp_path / "o"), batch=1)
    got = (tmp_path / "o").read_text().split("\n")
    assert len(got) == 3
    assert np.float32(got[1].split("LM0= ")[1].split()[0]) == np.float32(models[0].score(" ".join(words)))


@pytest.mark.parametrize("layout", ["probing", "trie"])
def test_kenlm_binaries_give_the_kenlm_modules_scores(models, tmp_path, layout):
    """A KenLM binary (its own vocabulary hashing and lookups, prefetched ahead of
    the probing layout's) rescored bit for bit as the real kenlm module scores."""
    kenlm = pytest.importorskip("kenlm")
    path = tmp_path / f"o5.{layout}.bin"
    path.write_bytes(lzma.decompress((REFERENCE / "kenlm-binary" / f"ptb5k.o5.{layout}.bin.xz").read_bytes()))
    hyps = _edited_lists(11, n_ids=6, per_id=30)
    src = tmp_path / "l"
    src.write_bytes("".join(f"{sid} ||| {' '.join(w)} ||| F= 0 ||| 0\n" for sid, w in hyps).encode())
    nplm.rescore(str(src), [str(path)], str(tmp_path / "o"))
    reference = kenlm.Model(str(path))
    for (_, words), line in zip(hyps, (tmp_path / "o").read_bytes().splitlines()):
        got = np.float32(line.split(b"LM0= ")[1].split()[0].decode())
        assert got == np.float32(reference.score(" ".join(words))), words


def test_words_of_every_length_between_every_delimiter(models, tmp_path):
    """Words of 1 to 20 bytes (their keys change at 8), separated by runs of every
    delimiter, hypotheses longer than 64 bytes, and a plain list whose last
    hypothesis ends the file (no byte may be read past it)."""
    rng = random.Random(17)
    vocab = [w for w in PTB_WORDS + POOL] + ["x" * k for k in range(1, 21)] + ["company" + "s" * k for k in range(4)]
    lines = []
    for i in range(40):
        words = [rng.choice(vocab) for _ in range(rng.randrange(1, 30))]
        gaps = [rng.choice([" ", "  ", "\v", "\f", " \v\f ", "\r "]) for _ in words]
        hyp = "".join(g + w for g, w in zip(gaps, words)).lstrip(" ") + rng.choice(["", " ", "\f"])
        lines.append((str(i // 5), hyp))
    data = "\n".join(f"{sid}\t{hyp}" for sid, hyp in lines)       # no newline at the end
    src = tmp_path / "l.tsv"
    src.write_bytes(data.encode("utf-8"))
    nplm.rescore(str(src), models, str(tmp_path / "o"), names=NAMES)
    got = (tmp_path / "o").read_bytes().split(b"\n")
    assert len(got) == len(lines) and not (tmp_path / "o").read_bytes().endswith(b"\n")
    for (_, hyp), line in zip(lines, got):
        values = line.split(b"\t")[-3:]
        for model, v in zip(models, values):
            assert np.float32(v.decode()) == np.float32(model.score(hyp)), (hyp, v)
