"""nplm beside the real kenlm module in one process: states compare without errors,
an nplm model handed a kenlm.State says what to do, and mixtures and n-best rescoring
take real kenlm models as components."""
import kenlm
import pytest

import nplm

from helpers import ROOT, quiet_config

ARPA = str(ROOT / "examples" / "toy.arpa")


def test_states_of_the_two_modules_compare_unequal_without_errors():
    ours, theirs = nplm.State(), kenlm.State()
    assert (ours == theirs) is False and (ours != theirs) is True
    assert (ours == None) is False                    # noqa: E711 (the comparison is the test)
    assert {ours: 1}.get(theirs) is None
    with pytest.raises(TypeError):
        ours < theirs                                  # noqa: B015 (no order between kinds)
    with pytest.raises(TypeError):
        ours == 1                                      # noqa: B015 (as kenlm: only states compare)


@pytest.mark.parametrize("method", ["BaseScore", "BaseFullScore"])
def test_a_kenlm_state_given_to_an_nplm_model_names_the_fix(method):
    model = nplm.Model(ARPA, quiet_config())
    good = nplm.State()
    model.BeginSentenceWrite(good)
    with pytest.raises(TypeError, match=r"expected nplm\.State, got kenlm\.State.*nplm\.State\(\)"):
        getattr(model, method)(kenlm.State(), "the", good)
    with pytest.raises(TypeError, match="got kenlm.State"):
        getattr(model, method)(good, "the", kenlm.State())
    with pytest.raises(TypeError, match="got kenlm.State"):
        model.BeginSentenceWrite(kenlm.State())
    # the right state still scores as kenlm's model with kenlm's states
    theirs, t_in, t_out = kenlm.Model(ARPA, quiet_config(kenlm)), kenlm.State(), kenlm.State()
    theirs.BeginSentenceWrite(t_in)
    out = nplm.State()
    assert model.BaseScore(good, "the", out) == theirs.BaseScore(t_in, "the", t_out)


def test_real_kenlm_models_mix_and_rescore(tmp_path):
    theirs = kenlm.Model(ARPA, quiet_config(kenlm))
    mix = nplm.interpolate([theirs, nplm.Model(ARPA, quiet_config())], [0.5, 0.5])
    assert mix.score("the cat sat") == pytest.approx(theirs.score("the cat sat"), abs=1e-5)
    nbest = tmp_path / "nbest.txt"
    nbest.write_text("0\tthe cat sat\n0\tsat cat the\n")
    out = tmp_path / "out.txt"
    nplm.rescore(str(nbest), [theirs], str(out))
    scores = [float(row.split("\t")[-1]) for row in out.read_text().splitlines()]
    assert scores == pytest.approx([theirs.score("the cat sat"), theirs.score("sat cat the")], abs=1e-4)
