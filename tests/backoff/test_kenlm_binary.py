"""KenLM's own binary files (written by KenLM's build_binary) read by nplm, against
the real kenlm module loading the same file.

Every token's log10 probability (bit for bit, quantised files included), n-gram
length and OOV flag; which states compare equal along each sentence; the batch API,
distributions, vocabulary access and load methods."""
import lzma
import mmap
import shutil
import struct

import kenlm
import numpy as np
import pytest

import nplm

from helpers import DATA, REFERENCE, ROOT, kenlm_program, need_shared, read_lines

BINARIES = REFERENCE / "kenlm-binary"
NAMES = sorted(p.name[:-len(".bin.xz")] for p in BINARIES.glob("*.bin.xz")) if BINARIES.is_dir() else []


@pytest.fixture(scope="session")
def kenlm_binaries(tmp_path_factory):
    """The reference binaries, decompressed: name -> path."""
    need_shared()
    tmp = tmp_path_factory.mktemp("kenlm-binary")
    out = {}
    for name in NAMES:
        out[name] = str(tmp / f"{name}.bin")
        with lzma.open(BINARIES / f"{name}.bin.xz", "rb") as src, open(out[name], "wb") as dst:
            shutil.copyfileobj(src, dst)
    return out


@pytest.fixture(scope="module")
def texts():
    need_shared()
    lines = read_lines(REFERENCE / "ptb5k.txt") + read_lines(DATA / "ptb" / "ptb.valid.txt")
    lines += ["zzqx unknownword the", "</s> the </s>", "<s> the cat", "  the\tcat \x0b sat\r ", "",
              "<unk> UNK <UNK>", " ".join(["the"] * 40)]
    # sentences of more words than a sentence's scoring hands to the core at once
    # (runs of 64): the state crosses from one run to the next
    lines += [" ".join(lines[i:i + 12]) for i in range(0, 120, 12)] + [" ".join(["of the"] * 70)]
    return lines


def _bits(x):
    return struct.pack("<f", x)


def _tokens(model, texts):
    """(log10 prob as float32 bytes, ngram_length, oov) of every token, </s> included."""
    return [(_bits(p), n, o) for s in texts for p, n, o in model.full_scores(s)]


@pytest.mark.parametrize("name", NAMES)
def test_every_token_as_kenlm(kenlm_binaries, texts, name):
    path = kenlm_binaries[name]
    ours, theirs = nplm.Model(path), kenlm.Model(path)
    assert ours.order == theirs.order
    got, want = _tokens(ours, texts), _tokens(theirs, texts)
    assert len(got) == len(want)
    bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert not bad, f"{len(bad)} of {len(want)} tokens differ, first at {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"
    for s in texts[:500]:
        assert _bits(ours.score(s)) == _bits(theirs.score(s))
        assert _bits(ours.score(s, bos=False, eos=False)) == _bits(theirs.score(s, bos=False, eos=False))


def _chain(model, state_type, sentence, begin=True):
    """Scores and states along a sentence, by BaseFullScore."""
    s = state_type()
    if begin:
        model.BeginSentenceWrite(s)
    else:
        model.NullContextWrite(s)
    states, results = [s], []
    for w in sentence.split() + ["</s>"]:
        out = state_type()
        r = model.BaseFullScore(states[-1], w, out)
        results.append((_bits(r.log_prob), r.ngram_length, r.oov))
        states.append(out)
    return states, results


def _partition(states):
    """For each state, the index of the first state equal to it."""
    first = {}
    return [first.setdefault(s, i) for i, s in enumerate(states)]


@pytest.mark.parametrize("name", NAMES)
def test_state_chains_as_kenlm(kenlm_binaries, texts, name):
    path = kenlm_binaries[name]
    ours, theirs = nplm.Model(path), kenlm.Model(path)
    prev_a = prev_b = None
    for k, sentence in enumerate(texts[:400]):
        a_states, a = _chain(ours, nplm.State, sentence, begin=k % 5 != 0)
        b_states, b = _chain(theirs, kenlm.State, sentence, begin=k % 5 != 0)
        assert a == b, sentence
        assert _partition(a_states) == _partition(b_states), sentence
        # across sentences too: states equal in one model are equal in the other
        if prev_a is not None:
            assert [x == y for x, y in zip(a_states, prev_a)] == [x == y for x, y in zip(b_states, prev_b)]
        prev_a, prev_b = a_states, b_states


@pytest.mark.parametrize("name", ["ptb5k.o5.probing", "ptb5k.o5.trie-a22q8b8", "ptb5k.o3.trie-q4b6"])
def test_batch_api_and_distribution(kenlm_binaries, texts, name):
    path = kenlm_binaries[name]
    ours, theirs = nplm.Model(path), kenlm.Model(path)
    sample = texts[:300]
    want = np.array([theirs.score(s) for s in sample])
    assert np.array_equal(ours.score_sentences(sample), want)
    assert np.array_equal(ours.score_sentences(sample, threads=2), want)
    probs, lengths, oov, offsets = ours.full_scores_batch(sample)
    flat = [t for s in sample for t in theirs.full_scores(s)]
    assert np.array_equal(probs, np.array([t[0] for t in flat], dtype=np.float32))
    assert lengths.tolist() == [t[1] for t in flat] and oov.tolist() == [t[2] for t in flat]
    # a whole distribution after a context equals kenlm's score of each word
    words = ours.vocab.words()
    state = nplm.State()
    ours.BeginSentenceWrite(state)
    for w in "the company said".split():
        out = nplm.State()
        ours.BaseScore(state, w, out)
        state = out
    kstate = kenlm.State()
    theirs.BeginSentenceWrite(kstate)
    for w in "the company said".split():
        out = kenlm.State()
        theirs.BaseScore(kstate, w, out)
        kstate = out
    dist = ours.log10_distribution(state)
    for i in range(1, len(words), 7):
        assert _bits(dist[i]) == _bits(theirs.BaseScore(kstate, words[i], kenlm.State())), words[i]


def _arpa_unigrams(name):
    order = name.split(".")[1]
    words, on = [], False
    with lzma.open(REFERENCE / f"ptb5k.{order}.arpa.xz", "rt", encoding="utf-8") as f:
        for line in f:
            if line.startswith("\\1-grams:"):
                on = True
            elif line.startswith("\\2-grams:"):
                break
            elif on and line.strip():
                words.append(line.split("\t")[1].strip())
    return words


@pytest.mark.parametrize("name", [n for n in NAMES if "novocab" not in n])
def test_vocabulary(kenlm_binaries, name):
    model = nplm.Model(kenlm_binaries[name])
    words = model.vocab.words()
    assert len(words) == len(model.vocab) and words[0] == "<unk>"
    assert sorted(words) == sorted(_arpa_unigrams(name))
    assert [model.vocab.id(w) for w in words] == [0] + list(range(1, len(words)))
    assert all(model.vocab.word(i) == w for i, w in enumerate(words[:50]))
    assert "the" in model and "zzqx" not in model


@pytest.mark.parametrize("name", [n for n in NAMES if "novocab" in n])
def test_without_vocabulary_strings(kenlm_binaries, texts, name):
    """build_binary -v: scored by word hash; listing the words is a clear error."""
    model = nplm.Model(kenlm_binaries[name])
    with_words = nplm.Model(kenlm_binaries[name.replace("-novocab", "")])
    assert len(model.vocab) == len(with_words.vocab)
    for w in ("the", "<s>", "</s>", "zzqx", "company"):
        assert model.vocab.id(w) == with_words.vocab.id(w)
    with pytest.raises(ValueError, match="without its vocabulary strings"):
        model.vocab.words()
    with pytest.raises(ValueError, match="build_binary -v"):
        model.vocab.word(5)


@pytest.mark.parametrize("method", ["LAZY", "POPULATE_OR_LAZY", "POPULATE_OR_READ", "READ", "PARALLEL_READ"])
def test_load_methods(kenlm_binaries, texts, method):
    path = kenlm_binaries["ptb5k.o5.trie-q8b8"]
    config = nplm.Config()
    config.load_method = getattr(nplm.LoadMethod, method)
    ours, theirs = nplm.Model(path, config), kenlm.Model(path)
    assert _tokens(ours, texts[:200]) == _tokens(theirs, texts[:200])
    memory = ours._data.mem     # READ copies the file, the others map it (read-only either way)
    assert isinstance(getattr(memory.base, "obj", None), mmap.mmap) == (method not in ("READ", "PARALLEL_READ"))
    assert not memory.flags.writeable


def test_detected_by_content(kenlm_binaries, tmp_path):
    """A KenLM binary under any name (here .arpa) is read as one."""
    path = tmp_path / "model.arpa"
    shutil.copyfile(kenlm_binaries["ptb5k.o3.trie"], path)
    sentence = "the company said it expects UNK results"
    model = nplm.Model(str(path))
    assert _bits(model.score(sentence)) == _bits(kenlm.Model(str(path)).score(sentence))
    import pickle
    assert _bits(pickle.loads(pickle.dumps(model)).score(sentence)) == _bits(model.score(sentence))
    # compressed, it cannot be mapped: the error says to decompress it
    import gzip
    packed = tmp_path / "model.bin.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(nplm.ModelLoadError, match="compressed KenLM binary file: decompress it"):
        nplm.Model(str(packed))


# --- hostile files ---------------------------------------------------------------------

def _patched(tmp_path, source, name, edit):
    raw = bytearray(open(source, "rb").read())
    raw = edit(raw)
    path = tmp_path / name
    path.write_bytes(bytes(raw))
    return str(path)


def _fails(path, *patterns):
    with pytest.raises(nplm.ModelLoadError) as info:
        nplm.Model(path)
    message = str(info.value)
    assert path in message, message
    for p in patterns:
        assert p in message, message
    return message


def _counts_at(order):
    return 88 + 20, [88 + 20 + 8 * i for i in range(order)]


@pytest.mark.parametrize("name", ["ptb5k.o3.probing", "ptb5k.o3.trie-a22q8b8", "ptb5k.o5.trie"])
def test_truncated(kenlm_binaries, tmp_path, name):
    source = kenlm_binaries[name]
    size = len(open(source, "rb").read())
    for keep in (10, 100, 150, 4096, size // 3, size // 2, size - 100000):
        path = _patched(tmp_path, source, f"cut{keep}.bin", lambda raw: raw[:keep])
        _fails(path, "truncated" if keep >= 100 else "")


def test_wrong_version_and_unfinished(kenlm_binaries, tmp_path):
    source = kenlm_binaries["ptb5k.o3.probing"]
    v4 = _patched(tmp_path, source, "v4.bin", lambda raw: raw.replace(b"format version 5", b"format version 4", 1))
    _fails(v4, "version 4", "version 5")
    unfinished = _patched(tmp_path, source, "incomplete.bin",
                          lambda raw: b"mmap lm http://kheafield.com/code incomplete\n" + raw[45:])
    _fails(unfinished, "did not finish building")


def test_other_type_sizes(kenlm_binaries, tmp_path):
    """A build with 64-bit word ids writes other sanity values."""
    source = kenlm_binaries["ptb5k.o3.trie"]

    def wide_ids(raw):
        raw[0x48:0x50] = struct.pack("<Q", 2 ** 64 - 1)
        return raw
    _fails(_patched(tmp_path, source, "wide.bin", wide_ids), "type sizes")


def test_orders(kenlm_binaries, tmp_path):
    source = kenlm_binaries["ptb5k.o3.trie"]

    def order(n):
        def edit(raw):
            raw[88] = n
            return raw
        return edit
    _fails(_patched(tmp_path, source, "o17.bin", order(17)), "order 17", "16")
    _fails(_patched(tmp_path, source, "o1.bin", order(1)), "order 1")
    # order 4 with the counts of order 3: the layout no longer fits the file
    _fails(_patched(tmp_path, source, "o4.bin", order(4)))


@pytest.mark.parametrize("name", ["ptb5k.o3.probing", "ptb5k.o5.trie-q8b8", "ptb5k.o3.trie-novocab"])
def test_corrupt_counts(kenlm_binaries, tmp_path, name):
    source = kenlm_binaries[name]
    order = int(name.split(".")[1][1])
    _, where = _counts_at(order)
    for n in range(order):
        for delta in (1, -1, 1000, 2 ** 40):
            def edit(raw):
                c = struct.unpack_from("<Q", raw, where[n])[0]
                struct.pack_into("<Q", raw, where[n], max(c + delta, 0))
                return raw
            path = _patched(tmp_path, source, f"c{n}_{delta}.bin", edit)
            _fails(path)    # (one longest n-gram fewer: the pointers no longer end at the count)


def test_corrupt_trie_config(kenlm_binaries, tmp_path):
    from nplm.backoff.kenlm import format as fmt
    source = kenlm_binaries["ptb5k.o3.trie-a22q8b8"]
    raw = open(source, "rb").read()
    header = fmt.parse_header(raw, len(raw))
    at = fmt.search_offset(header)

    def setbyte(offset, value):
        def edit(raw):
            raw[offset] = value
            return raw
        return edit
    _fails(_patched(tmp_path, source, "qv.bin", setbyte(at, 7)), "quantization version 7")
    _fails(_patched(tmp_path, source, "qb.bin", setbyte(at + 1, 0)), "bits")
    bhiksha = at + fmt.quant_size(3, 8, 8) + (header.counts[0] + 2) * 16
    _fails(_patched(tmp_path, source, "bv.bin", setbyte(bhiksha, 3)), "compression version 3")


@pytest.mark.parametrize("name", ["ptb5k.o3.probing", "ptb5k.o3.trie-a22q8b8", "ptb5k.o3.trie"])
def test_corrupt_tables_never_crash(kenlm_binaries, texts, tmp_path, name):
    """Garbage in the tables gives wrong numbers or a clear error, never a crash: every
    index read from the file is bounded by its table."""
    source = kenlm_binaries[name]
    rng = np.random.default_rng(1)
    raw = open(source, "rb").read()
    from nplm.backoff.kenlm import format as fmt
    start = fmt.search_offset(fmt.parse_header(raw, len(raw)))
    for k in range(6):
        def edit(raw):
            span = len(raw) - start
            pos = start + rng.integers(0, span, 2000)
            raw = np.frombuffer(bytes(raw), np.uint8).copy()
            raw[pos] = rng.integers(0, 256, len(pos))
            return bytearray(raw.tobytes())
        path = _patched(tmp_path, source, f"garbage{k}.bin", edit)
        try:
            model = nplm.Model(path)
        except nplm.ModelLoadError as e:
            assert path in str(e)
            continue
        model.score_sentences(texts[:300])
        state = nplm.State()
        model.BeginSentenceWrite(state)
        model.log10_distribution(state)


# --- back to ARPA ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["ptb5k.o3.probing", "ptb5k.o3.probing-p1.2", "ptb5k.o5.trie",
                                  "ptb5k.o5.trie-a22q8b8", "ptb5k.o3.trie-q4b6", "ptb5k.o3.trie-a22"])
def test_convert_to_arpa(kenlm_binaries, texts, tmp_path, name):
    """The recovered ARPA (dequantised values for quantised files) loads in kenlm and
    scores as the binary does; an unquantised file gives back lmplz's n-grams."""
    from nplm.cli.main import main
    path, out = kenlm_binaries[name], str(tmp_path / "back.arpa")
    assert main(["convert", path, out]) == 0
    config = kenlm.Config()
    config.arpa_complain = kenlm.ARPALoadComplain.NONE
    config.show_progress = False
    from_arpa, from_binary = kenlm.Model(out, config), kenlm.Model(path)
    assert _tokens(from_arpa, texts[:1500]) == _tokens(from_binary, texts[:1500])
    from nplm.backoff.arpa import read_arpa
    got = read_arpa(out)
    reference = read_arpa(str(REFERENCE / f"ptb5k.{name.split('.')[1]}.arpa.xz"))
    assert got.counts == reference.counts
    if "q" not in name.split(".")[2]:       # unquantised: lmplz's own n-grams and values
        for n in range(reference.order):
            assert _ngrams(got, n) == _ngrams(reference, n)


def _ngrams(tables, n):
    return {tuple(tables.vocab[w] for w in row): (p, b) for row, p, b in
            zip(tables.ids[n].tolist(), tables.logprob[n].tolist(), tables.backoff[n].tolist())}


def test_convert_without_vocabulary_strings(kenlm_binaries, tmp_path):
    from nplm.convert import convert
    with pytest.raises(nplm.FormatError, match="cannot be recovered"):
        convert(kenlm_binaries["ptb5k.o3.trie-novocab"], str(tmp_path / "x.arpa"))
    assert not (tmp_path / "x.arpa").exists()


# --- everything built on a model ------------------------------------------------------------

def test_interpolation_component(kenlm_binaries):
    """A KenLM binary is an interpolation component like any model."""
    a, b = kenlm_binaries["ptb5k.o5.trie-a22q8b8"], kenlm_binaries["ptb5k.o3.probing"]
    mixed = nplm.interpolate([a, b], [0.3, 0.7])
    ka, kb = kenlm.Model(a), kenlm.Model(b)
    for sentence in ("the company said it expects UNK results", "zzqx the"):
        want, sa, sb = 0.0, kenlm.State(), kenlm.State()
        ka.BeginSentenceWrite(sa)
        kb.BeginSentenceWrite(sb)
        for w in sentence.split() + ["</s>"]:
            oa, ob = kenlm.State(), kenlm.State()
            pa, pb = ka.BaseScore(sa, w, oa), kb.BaseScore(sb, w, ob)
            want += np.log10(0.3 * 10.0 ** pa + 0.7 * 10.0 ** pb)
            sa, sb = oa, ob
        assert mixed.score(sentence) == pytest.approx(want, abs=1e-4)
    with pytest.raises(ValueError, match="build_binary -v"):
        nplm.interpolate([kenlm_binaries["ptb5k.o3.trie-novocab"], b])


def test_cli_query_as_kenlm_query(kenlm_binaries, texts, tmp_path, capsys, monkeypatch):
    """`nplm query` prints what KenLM's query prints for the same binary (word ids
    included), and its totals match kenlm's scores."""
    import io
    import subprocess

    from nplm.cli.main import main
    path = kenlm_binaries["ptb5k.o5.trie-q4b6"]
    text = "\n".join(texts[:50]) + "\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["query", path]) == 0
    ours = capsys.readouterr().out.splitlines()
    theirs = subprocess.run([kenlm_program("query"), path], input=text.encode(), capture_output=True).stdout.decode()
    assert ours[:50] == theirs.splitlines()[:50]
    model = kenlm.Model(path)
    for line, sentence in zip(ours, texts[:50]):
        total, oov = line.split("Total: ")[1].split(" OOV: ")
        assert float(total) == pytest.approx(model.score(sentence), rel=1e-7)
        assert int(oov) == sum(o for _, _, o in model.full_scores(sentence))




def test_rest_cost_probing(texts, tmp_path):
    """build_binary -r (rest costs from lower-order models): wider probing entries."""
    import subprocess
    need_shared()
    arpas = {}
    for order in (2, 3):
        arpas[order] = tmp_path / f"o{order}.arpa"
        with lzma.open(REFERENCE / f"ptb5k.o{order}.arpa.xz", "rb") as src:
            arpas[order].write_bytes(src.read())
    # an order-1 model with the same vocabulary: the bigram model's unigrams
    lines, out = arpas[2].read_text(encoding="utf-8").split("\n"), []
    for line in lines:
        if line == "\\2-grams:":
            break
        if not line.startswith("ngram 2="):
            out.append("\t".join(line.split("\t")[:2]))
    arpas[1] = tmp_path / "o1.arpa"
    arpas[1].write_text("\n".join(out + ["\\end\\", ""]), encoding="utf-8")
    path = str(tmp_path / "rest.bin")
    subprocess.run([kenlm_program("build_binary"), "-r", f"{arpas[1]} {arpas[2]}", "probing", str(arpas[3]), path],
                   check=True, capture_output=True)
    ours, theirs = nplm.Model(path), kenlm.Model(path)
    assert ours._data.header.model_type == 1        # probing with rest costs
    assert _tokens(ours, texts) == _tokens(theirs, texts)
    for sentence in texts[:200]:
        a_states, a = _chain(ours, nplm.State, sentence)
        b_states, b = _chain(theirs, kenlm.State, sentence)
        assert a == b and _partition(a_states) == _partition(b_states)


@pytest.mark.parametrize("name", ["ptb5k.o3.probing", "ptb5k.o5.trie-a22q8b8", "ptb5k.o3.trie-novocab"])
def test_verify(kenlm_binaries, tmp_path, name):
    """nplm verify reads every table: sound files pass; a file whose tables were
    overwritten is reported as damaged (and refused by a load that reads it all)."""
    from nplm.backoff.kenlm import format as fmt
    from nplm.verify import verify
    path = kenlm_binaries[name]
    assert verify(path).endswith("OK") and "KenLM" in verify(path)
    raw = bytearray(open(path, "rb").read())
    header = fmt.parse_header(bytes(raw))
    layout = fmt.layout(header, lambda o, n: bytes(raw[o:o + n]))
    table = layout.middle[0] if header.is_trie else layout.vocab
    raw[table.end - 3000:table.end - 1000] = bytes(range(250)) * 8
    bad = tmp_path / "bad.bin"
    bad.write_bytes(bytes(raw))
    with pytest.raises(nplm.FormatError, match="corrupt"):
        verify(str(bad))
    if header.is_trie:
        with pytest.raises(nplm.ModelLoadError, match="corrupt KenLM binary"):
            nplm.Model(str(bad))


@pytest.mark.parametrize("name", ["ptb5k.o3.probing", "ptb5k.o3.trie-novocab"])
def test_verify_reports_bytes_after_the_model(kenlm_binaries, tmp_path, name):
    """Bytes appended to a KenLM binary are not read by a load, so they are left to
    verify: every build_binary file ends with its last word (or its tables, -v)."""
    from nplm.verify import verify
    bad = tmp_path / "appended.bin"
    bad.write_bytes(open(kenlm_binaries[name], "rb").read() + b"\0tail\0" * 100)
    assert nplm.Model(str(bad)).score("the company said") == nplm.Model(kenlm_binaries[name]).score("the company said")
    with pytest.raises(nplm.FormatError, match="600 bytes after the end of the model"):
        verify(str(bad))


ORDER7 = ROOT / "tests" / "data" / "kenlm-order7"


@pytest.mark.parametrize("layout", ["probing", "trie", "trie-a22q8b8"])
def test_order_above_kenlm_default(tmp_path, layout, capsys, monkeypatch):
    """Order 7 (beyond the kenlm module's 6): nplm query prints what KenLM's query
    printed for the same file, and an unquantised file scores as its ARPA."""
    import io

    from nplm.cli.main import main
    path = tmp_path / f"o7.{layout}.bin"
    path.write_bytes(lzma.decompress((ORDER7 / f"tiny40.o7.{layout}.bin.xz").read_bytes()))
    text = (ORDER7 / "tiny40.txt").read_text(encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main(["query", str(path)]) == 0
    ours = capsys.readouterr().out.splitlines()[:40]
    theirs = lzma.decompress((ORDER7 / f"tiny40.o7.{layout}.query.txt.xz").read_bytes()).decode().splitlines()
    assert ours == theirs
    model = nplm.Model(str(path))
    assert model.order == 7 and any(n == 7 for s in text.splitlines() for _, n, _ in model.full_scores(s))
    if "q" not in layout:
        arpa = tmp_path / "o7.arpa"
        arpa.write_bytes(lzma.decompress((ORDER7 / "tiny40.o7.arpa.xz").read_bytes()))
        config = nplm.Config()
        config.show_progress = False
        config.arpa_complain = nplm.ARPALoadComplain.NONE
        lines = text.splitlines() + ["zzqx the", " ".join(text.split()[:30])]
        assert _tokens(model, lines) == _tokens(nplm.Model(str(arpa), config), lines)


def test_kenlm_module_component_of_a_binary(kenlm_binaries):
    """A kenlm.Model of a KenLM binary in a mixture: its words come from the file (nplm
    reads them; kenlm cannot list them), as with the path itself."""
    import warnings
    path = kenlm_binaries["ptb5k.o3.trie"]
    other = kenlm_binaries["ptb5k.o5.probing"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        via_module = nplm.interpolate([kenlm.Model(path), other])
    via_path = nplm.interpolate([path, other])
    assert via_module.vocab.words() == via_path.vocab.words()
    sentence = "the company said it expects UNK results"
    assert via_module.score(sentence) == pytest.approx(via_path.score(sentence), abs=1e-5)
    with pytest.warns(UserWarning, match="build_binary -v"):
        nplm.interpolate([kenlm.Model(kenlm_binaries["ptb5k.o3.trie-novocab"]), other])


BUILDS = [("ptb5k.o2", ["probing"]), ("ptb5k.o2", ["trie"]), ("ptb5k.o2", ["-a", "22", "-q", "8", "-b", "8", "trie"]),
          ("ptb5k.o4.prune011", ["-p", "3.0", "probing"]), ("ptb5k.o4.prune011", ["trie"]),
          ("ptb5k.o4.prune011", ["-a", "255", "-q", "8", "-b", "8", "trie"])]


@pytest.mark.parametrize("arpa,flags", BUILDS, ids=[f"{a}:{'_'.join(f)}" for a, f in BUILDS])
def test_more_build_binary_files(texts, tmp_path, arpa, flags):
    """Bigram models and a pruned model (whose missing suffixes KenLM fills with blank
    entries), with other flags, built here by KenLM's build_binary when it is at hand:
    every token as kenlm, and back to an ARPA that scores as the binary."""
    import subprocess
    need_shared()
    source = tmp_path / "in.arpa"
    with lzma.open(REFERENCE / f"{arpa}.arpa.xz", "rb") as src:
        source.write_bytes(src.read())
    path = str(tmp_path / "model.bin")
    subprocess.run([kenlm_program("build_binary"), *flags, str(source), path], check=True, capture_output=True)
    theirs = kenlm.Model(path)
    assert _tokens(nplm.Model(path), texts) == _tokens(theirs, texts)
    from nplm.convert import convert
    convert(path, str(tmp_path / "back.arpa"))
    config = kenlm.Config()
    config.arpa_complain = kenlm.ARPALoadComplain.NONE
    config.show_progress = False
    assert _tokens(kenlm.Model(str(tmp_path / "back.arpa"), config), texts[:1000]) == _tokens(theirs, texts[:1000])
