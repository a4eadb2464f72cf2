"""The kenlm module's API surface, behaviour for behaviour (see KENLM-API.md),
and the places where nplm deliberately does better."""
import copy
import os
import pickle

import kenlm
import numpy as np
import pytest

import nplm

from helpers import REFERENCE, need_shared

ARPA = str(REFERENCE / "ptb5k.o3.arpa.xz")


@pytest.fixture(scope="module")
def models():
    need_shared()
    kc = kenlm.Config()
    kc.show_progress = False
    nc = nplm.Config()
    nc.show_progress = False
    return kenlm.Model(ARPA, kc), nplm.Model(ARPA, nc)


def test_public_names_cover_kenlm():
    public = {n for n in dir(kenlm) if not n.startswith("_") and n != "os"}
    assert public <= set(dir(nplm))


def test_readme_submodule_names_work_after_import_nplm():
    """The README's ``nplm.corpus.evaluate(m, lines)``: a fresh interpreter that only
    ran ``import nplm`` (other tests here have imported the submodules already)."""
    import subprocess
    import sys
    code = ("import nplm; print(nplm.corpus.evaluate.__name__, nplm.distil.distil.__name__, "
            "nplm.interpolate.__name__)\n"
            "try:\n    nplm.nonesuch\nexcept AttributeError as e:\n    print(e)")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(nplm.__file__)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["evaluate distil interpolate",
                                     "module 'nplm' has no attribute 'nonesuch'"]


def test_flat_layout_module_names_import_with_a_deprecation_warning():
    """``import nplm.arpa`` (a module name of the flat layout) in a fresh interpreter:
    a DeprecationWarning at the importing line, and the names of the module that now
    holds them."""
    import subprocess
    import sys
    code = ("import warnings\nwarnings.simplefilter('always')\nimport nplm.arpa, nplm.formats.quantize\n"
            "from nplm.backoff.arpa import read_arpa\n"
            "print(nplm.arpa.read_arpa is read_arpa, nplm.formats.quantize.__name__)")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(nplm.__file__)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["True nplm.formats.quantize"]
    assert "<string>:3: DeprecationWarning: nplm.arpa is deprecated; use nplm.backoff.arpa" in r.stderr
    assert "nplm.formats.quantize is deprecated; use nplm.neural.quantize" in r.stderr


def test_constants_match():
    for cls in ("LoadMethod", "ARPALoadComplain"):
        k, n = getattr(kenlm, cls), getattr(nplm, cls)
        names = [a for a in dir(k) if a.isupper()]
        assert names and all(getattr(k, a) == getattr(n, a) for a in names)
    kc, nc = kenlm.Config(), nplm.Config()
    assert (kc.load_method, kc.show_progress, kc.arpa_complain) == \
        (nc.load_method, nc.show_progress, nc.arpa_complain)


def test_path_repr_order(models):
    km, nm = models
    assert nm.path == km.path and isinstance(nm.path, bytes)
    assert repr(nm) == repr(km)
    assert nm.order == km.order == 3
    assert issubclass(nplm.LanguageModel, nplm.Model)


def test_empty_and_edge_sentences(models):
    km, nm = models
    for s in ["", " ", "\t\n"]:
        assert nm.score(s) == km.score(s)
        assert nm.score(s, bos=False, eos=False) == km.score(s, bos=False, eos=False) == 0.0
    # bytes are accepted like kenlm's as_str; other types raise TypeError.
    assert nm.score(b"the cat") == km.score(b"the cat")
    with pytest.raises(TypeError):
        nm.score(3)
    with pytest.raises(TypeError):
        km.score(3)
    # Non-ASCII whitespace is part of a word, as in kenlm (which splits bytes).
    s = "the\xa0cat sat\u2003down"
    got, expect = list(nm.full_scores(s)), list(km.full_scores(s))
    assert len(got) == len(expect) == 3      # two words (no ASCII space inside) and </s>
    for (p, n, o), (kp, kn, ko) in zip(got, expect):
        assert p == pytest.approx(kp, abs=1e-6) and (n, o) == (kn, ko)
    assert nm.perplexity(s) == pytest.approx(km.perplexity(s), rel=1e-6)


def test_perplexity_is_bit_identical_to_kenlm(models):
    """kenlm divides score()'s float32 total in double; a float32 division differed in
    the last digits on most lines."""
    from helpers import DATA, read_lines
    km, nm = models
    lines = read_lines(DATA / "ptb" / "ptb.valid.txt", limit=1500)
    lines += ["café naïve 日本 the", "", " ", "the\u3000cat sat", "a\x1cb zzqx", "UNK UNK UNK",
              "\t\x0bthe\x0c\r", " ".join(lines[:40])]
    assert [nm.score(s) for s in lines] == [km.score(s) for s in lines]   # same totals, so:
    bad = [s for s in lines if nm.perplexity(s) != km.perplexity(s)]
    assert not bad, (len(bad), bad[:3])
    assert nm.perplexity(b"the cat \xc3\xa9t\xc3\xa9") == km.perplexity(b"the cat \xc3\xa9t\xc3\xa9")


def test_full_scores_types(models):
    km, nm = models
    items = list(nm.full_scores("the zzqx"))
    assert [type(x) for x in items[0]] == [float, int, bool]
    assert items[1][2] is True and items[1][1] == 1
    assert items[-1][2] is False
    assert len(items) == len(list(km.full_scores("the zzqx")))


def test_base_full_score_return(models):
    km, nm = models
    ks, kout = kenlm.State(), kenlm.State()
    ns, nout = nplm.State(), nplm.State()
    km.BeginSentenceWrite(ks)
    nm.BeginSentenceWrite(ns)
    k = km.BaseFullScore(ks, "the", kout)
    n = nm.BaseFullScore(ns, "the", nout)
    assert (n.log_prob, n.ngram_length, n.oov) == (k.log_prob, k.ngram_length, k.oov)
    assert repr(n) == repr(k)
    with pytest.raises(AttributeError):
        n.log_prob = 0.0
    # bytes words: kenlm raises TypeError here, nplm accepts them.
    with pytest.raises(TypeError):
        km.BaseScore(ks, b"the", kout)
    assert nm.BaseScore(ns, b"the", nout) == nm.BaseScore(ns, "the", nout)


def test_state_copy_pickle(models):
    _, nm = models
    s, out = nplm.State(), nplm.State()
    nm.BeginSentenceWrite(s)
    nm.BaseScore(s, "the", out)
    assert copy.copy(out) == out and copy.copy(out) is not out
    assert copy.deepcopy(out) == out            # kenlm: TypeError
    again = pickle.loads(pickle.dumps(out))     # kenlm: not picklable
    assert again == out and hash(again) == hash(out)
    a, b = nplm.State(), nplm.State()
    assert nm.BaseScore(again, "company", a) == nm.BaseScore(out, "company", b)
    assert nplm.State() == nplm.State() and not nplm.State() != nplm.State()


def test_model_pickles_by_path(models):
    _, nm = models
    again = pickle.loads(pickle.dumps(nm))
    assert again.path == nm.path
    assert again.score("the company said") == nm.score("the company said")


def test_missing_and_unreadable_files(tmp_path, capfd):
    missing = str(tmp_path / "nope.arpa")
    with pytest.raises(OSError) as n_err:
        nplm.Model(missing)
    n_said = capfd.readouterr().err
    with pytest.raises(OSError) as k_err:
        kenlm.Model(missing)
    assert str(n_err.value).startswith(f"Cannot read model '{missing}'")
    assert str(k_err.value).startswith(f"Cannot read model '{missing}'")
    assert n_said == capfd.readouterr().err == ""       # no "build a binary" advice first
    with pytest.raises(OSError, match="Cannot read model"):
        nplm.Model(str(tmp_path))                      # a directory
    garbage = tmp_path / "garbage.arpa"
    garbage.write_bytes(os.urandom(256))
    with pytest.raises(OSError) as e:
        nplm.Model(str(garbage))
    assert isinstance(e.value, nplm.FormatError)       # and also a ValueError with the location
    assert "garbage.arpa" in str(e.value)


def test_vocab_access(models):
    _, nm = models
    v = nm.vocab
    assert v.id("<unk>") == 0 and v.word(0) == "<unk>"
    for w in ["the", "</s>", "<s>"]:
        assert v.word(v.id(w)) == w
    assert v.id("zzqx") == 0
    assert len(v.words()) == len(v) == 7187
    assert list(v.ids(["the", "zzqx"])) == [v.id("the"), 0]
    with pytest.raises(IndexError):
        v.word(len(v))


@pytest.mark.parametrize("name,value", [
    ("foo", 1), ("load_mehtod", 0), ("show_progres", False),                  # no such attribute
    ("load_method", "lazy"), ("load_method", None), ("load_method", b"1"),   # not an integer
    ("arpa_complain", "x"), ("arpa_complain", None),
    ("load_method", 0), ("load_method", 1.0), ("load_method", True), ("load_method", np.int64(3)),
    ("arpa_complain", 2), ("arpa_complain", True),
    ("show_progress", 0), ("show_progress", None), ("show_progress", "x"), ("show_progress", 2),
])
def test_config_attributes_as_kenlm(name, value):
    """nplm.Config takes what kenlm.Config takes (same stored value) and raises the
    same exception type for what kenlm refuses: unknown names, non-integers."""
    k, n = kenlm.Config(), nplm.Config()
    try:
        setattr(k, name, value)
    except Exception as e:
        with pytest.raises(type(e)):
            setattr(n, name, value)
        return
    setattr(n, name, value)
    assert getattr(n, name) == getattr(k, name)
    assert type(getattr(n, name)) is type(getattr(k, name))
    with pytest.raises(AttributeError):
        n.foo


@pytest.mark.parametrize("name,value,error", [
    ("load_method", 7, ValueError), ("load_method", -1, ValueError), ("arpa_complain", 5, ValueError),
    ("load_method", 1.5, TypeError), ("arpa_complain", 2.7, TypeError),
])
def test_config_refuses_what_kenlm_would_store_as_nonsense(name, value, error):
    """kenlm stores 7 (and -1 as 4294967295) and truncates 1.5: nplm refuses them,
    naming the attribute and the valid constants."""
    setattr(kenlm.Config(), name, value)      # kenlm: silently accepted
    c = nplm.Config()
    with pytest.raises(error, match=f"Config.{name}"):
        setattr(c, name, value)
    assert getattr(c, name) == getattr(kenlm.Config(), name)     # unchanged default


def test_config_misspelling_suggests_the_attribute():
    with pytest.raises(AttributeError, match="did you mean 'load_method'"):
        nplm.Config().load_mehtod = 0


def test_none_and_foreign_states_are_type_errors(models):
    """kenlm segfaults on None for a State argument (so it is not called here).  nplm
    used to accept None and read -- or write -- the None object's memory as a state."""
    _, nm = models
    s = nplm.State()
    nm.BeginSentenceWrite(s)
    calls = [lambda: nm.BaseScore(None, "the", nplm.State()), lambda: nm.BaseScore(s, "the", None),
             lambda: nm.BaseFullScore(None, "the", nplm.State()), lambda: nm.BaseFullScore(s, "the", None),
             lambda: nm.BeginSentenceWrite(None), lambda: nm.NullContextWrite(None),
             lambda: nm.score_id(None, 3, nplm.State()), lambda: nm.score_id(s, 3, None),
             lambda: nm.log10_distribution(None), lambda: nm.BaseScore(kenlm.State(), "the", s),
             lambda: nm.BaseScore(s, "the", kenlm.State()), lambda: nm.BeginSentenceWrite(kenlm.State())]
    for call in calls:
        with pytest.raises(TypeError):
            call()
    assert None is not False and repr(None) == "None"     # None itself is intact
    t = nplm.State()
    nm.BeginSentenceWrite(t)
    assert s == t


def test_state_comparisons_with_other_objects():
    """== / != None: kenlm happens to give False / True (it compares with whatever
    memory follows the None object, so it is not asked here); nplm says so by
    definition.  Any other non-State is a TypeError in both, as is ordering against
    None."""
    k, n = kenlm.State(), nplm.State()
    assert (n == None) is False and (n != None) is True      # noqa: E711
    assert (None == n) is False and (n in [None]) is False   # noqa: E711
    for other in (1, "x"):
        with pytest.raises(TypeError):
            k == other
        with pytest.raises(TypeError):
            n == other
    with pytest.raises(TypeError):
        k == n                          # kenlm's own State: its TypeError
    assert (n == k) is False and (n != k) is True      # nplm's: never equal, no error
    with pytest.raises(TypeError):
        n < k
    for op in ("__lt__", "__le__", "__gt__", "__ge__"):
        with pytest.raises(TypeError):
            getattr(n, op)(None)
    assert sorted([nplm.State(), nplm.State()]) == [nplm.State(), nplm.State()]


def test_full_score_return_is_hashable(models):
    """kenlm's FullScoreReturn is hashable (by identity): scripts put them in sets and
    dicts.  nplm's compares by value, so it hashes by value."""
    km, nm = models
    seen = {}
    for model, S in ((km, kenlm.State), (nm, nplm.State)):
        s, out = S(), S()
        model.BeginSentenceWrite(s)
        r = model.BaseFullScore(s, "the", out)
        seen[r] = model
        assert r in {r} and hash(r) == hash(r)
    a, b = nplm.FullScoreReturn(-1.5, 2, False), nplm.FullScoreReturn(-1.5, 2, False)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != nplm.FullScoreReturn(-1.5, 2, True)


def test_config_argument_type(models):
    km, nm = models
    with pytest.raises(TypeError):
        kenlm.Model(ARPA, 3)
    with pytest.raises(TypeError, match="config"):
        nplm.Model(ARPA, 3)
    with pytest.raises(TypeError, match="config"):
        nplm.Model(ARPA, {"show_progress": False})
    # a kenlm.Config (a script mixing the two modules) is read field by field
    kc = kenlm.Config()
    kc.show_progress = False
    kc.arpa_complain = kenlm.ARPALoadComplain.NONE
    kc.load_method = kenlm.LoadMethod.LAZY
    m = nplm.Model(ARPA, kc)
    assert isinstance(m.config, nplm.Config)
    assert (m.config.show_progress, m.config.arpa_complain, m.config.load_method) == (False, 2, 0)
    assert m.score("the company said") == nm.score("the company said")


def test_perplexity_overflow_is_kenlms(tmp_path):
    """kenlm computes 10 ** x with Python floats: a perplexity beyond the float range
    is an OverflowError, not inf."""
    path = tmp_path / "huge.arpa"
    path.write_text("\\data\\\nngram 1=4\nngram 2=1\n\n\\1-grams:\n-1e30\t<unk>\n0\t<s>\t-0.5\n-1\t</s>\n"
                    "-1\ta\n\n\\2-grams:\n-0.5\t<s> a\n\n\\end\\\n")
    kc = kenlm.Config()
    kc.show_progress = False
    km = kenlm.Model(str(path), kc)
    nc = nplm.Config()
    nc.show_progress = False
    nm = nplm.Model(str(path), nc)
    for model in (km, nm):
        assert model.perplexity("a a") == pytest.approx(km.perplexity("a a"))
        with pytest.raises(OverflowError):
            model.perplexity("zzqx a")
