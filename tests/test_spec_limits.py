"""Interpolation specs cannot amplify a load, nest without end, or escape the
documented errors.

Specs that each named the next one 16 times loaded 4,096 models (9.8 GB) from 1.4 KB
of JSON at depth 3; a chain of 200 specs or JSON nested 1,000 deep raised
RecursionError, a weight of 10**400 OverflowError, and ``"version": true`` was
read as version 1.  A spec load now loads each file once, caps the nesting depth
and the number of components, and raises ModelLoadError naming the spec.
"""
import json

import pytest
from _bounded import ROOT, run_python

import nplm
from nplm.compose.interpolate import MAX_SPEC_COMPONENTS, MAX_SPEC_DEPTH

from helpers import quiet_config

TOY_ARPA = str(ROOT / "examples" / "toy.arpa")


def write_spec(path, models, weights=None, **fields):
    spec = {"nplm": "interpolation", "version": 1, "mode": "linear", "models": models,
            "weights": weights if weights is not None else [1 / len(models)] * len(models)}
    spec.update(fields)
    path.write_text(json.dumps(spec))
    return str(path)



def fanout_specs(d, depth, fan=16):
    """spec0 names spec1 ``fan`` times, ... the last names the toy ARPA ``fan`` times."""
    for i in reversed(range(depth + 1)):
        target = TOY_ARPA if i == depth else str(d / f"spec{i + 1}.json")
        write_spec(d / f"spec{i}.json", [target] * fan)
    return str(d / "spec0.json")


def test_fanout_bomb_is_refused_in_bounded_time_and_memory(tmp_path):
    spec = fanout_specs(tmp_path, 3)
    r = run_python(f"""
import nplm
cfg = nplm.Config(); cfg.show_progress = False; cfg.arpa_complain = nplm.ARPALoadComplain.NONE
try:
    nplm.Model({spec!r}, cfg)
except nplm.ModelLoadError as e:
    print("refused:", e)
""", memory_mib=1536, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "refused:" in r.stdout and f"more than {MAX_SPEC_COMPONENTS} components" in r.stdout


def test_shared_components_are_loaded_once(tmp_path):
    inner = write_spec(tmp_path / "inner.json", [TOY_ARPA, TOY_ARPA])
    outer = write_spec(tmp_path / "outer.json", [inner, TOY_ARPA, inner])
    m = nplm.Model(outer, quiet_config())
    comps = m._data.mixture.components
    assert comps[0] is comps[2]                                  # the inner spec, once
    inner_comps = comps[0]._data.mixture.components
    assert inner_comps[0] is inner_comps[1] is comps[1]          # the ARPA, once
    alone = nplm.Model(TOY_ARPA, quiet_config())
    for s in ("the dog saw a cat", "a b c"):
        assert abs(m.score(s) - alone.score(s)) < 1e-4          # a mixture of one model


def test_within_the_budget_loads(tmp_path):
    spec = fanout_specs(tmp_path, 1, fan=15)       # 15 + 15 * 15 = 240 components
    m = nplm.Model(spec, quiet_config())
    alone = nplm.Model(TOY_ARPA, quiet_config())
    assert abs(m.score("the dog saw a cat") - alone.score("the dog saw a cat")) < 1e-4


def test_a_chain_of_specs_is_refused_past_the_depth_limit(tmp_path):
    n = 200
    for i in range(n):
        write_spec(tmp_path / f"chain{i}.json", [str(tmp_path / f"chain{i + 1}.json") if i < n - 1 else TOY_ARPA])
    with pytest.raises(nplm.ModelLoadError, match=f"nested more than {MAX_SPEC_DEPTH} deep"):
        nplm.Model(str(tmp_path / "chain0.json"), quiet_config())
    ok = n - MAX_SPEC_DEPTH         # a chain of MAX_SPEC_DEPTH specs loads
    nplm.Model(str(tmp_path / f"chain{ok}.json"), quiet_config())


def test_deeply_nested_json_is_a_format_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"nplm": "interpolation", "version": 1, "mode": "linear", "x": '
                    + "[" * 100000 + "]" * 100000 + f', "models": [{json.dumps(TOY_ARPA)}], "weights": [1]}}')
    with pytest.raises(nplm.ModelLoadError, match="nested too deeply") as e:
        nplm.Model(str(path), quiet_config())
    assert str(path) in str(e.value)


@pytest.mark.parametrize("weights", [[10 ** 400, 1], [1e308 * 10, 1]])
def test_huge_weights_are_format_errors(tmp_path, weights):
    path = tmp_path / "w.json"
    text = json.dumps({"nplm": "interpolation", "version": 1, "mode": "linear",
                       "models": [TOY_ARPA, TOY_ARPA], "weights": [0, 1]})
    path.write_text(text.replace("[0, 1]", "[" + ", ".join(map(str, weights)).replace("inf", "1e400") + "]"))
    with pytest.raises(nplm.ModelLoadError, match="weights"):
        nplm.Model(str(path), quiet_config())


@pytest.mark.parametrize("version", [True, 1.0, "1"])
def test_version_must_be_an_integer(tmp_path, version):
    spec = write_spec(tmp_path / "v.json", [TOY_ARPA], [1.0], version=version)
    with pytest.raises(nplm.ModelLoadError, match="version"):
        nplm.Model(spec, quiet_config())


def test_cli_names_the_spec_without_a_traceback(tmp_path):
    spec = fanout_specs(tmp_path, 3)
    r = run_python(f"import sys; from nplm.cli.main import main; sys.exit(main(['query', {spec!r}]))",
                   timeout=120, stdin=None)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "spec0.json" in r.stderr and "components" in r.stderr


def test_verify_stops_at_the_depth_limit(tmp_path):
    from nplm.verify import verify
    n = 40
    for i in range(n):
        write_spec(tmp_path / f"chain{i}.json", [str(tmp_path / f"chain{i + 1}.json") if i < n - 1 else TOY_ARPA])
    with pytest.raises(nplm.FormatError, match=f"nested more than {MAX_SPEC_DEPTH} deep"):
        verify(str(tmp_path / "chain0.json"))
    assert verify(str(tmp_path / f"chain{n - MAX_SPEC_DEPTH}.json")).endswith(": OK")
