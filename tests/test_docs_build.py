"""The documentation site builds with warnings as errors (a broken cross-reference, a
docstring numpydoc cannot parse, a page missing from the index all fail), and the
benchmarks page is the one tools/docs_benchmarks.py writes from the recorded results."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_with_warnings_as_errors(tmp_path):
    for module in ("sphinx", "numpydoc", "myst_parser"):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[docs]')")
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html",
                        str(ROOT / "docs"), str(tmp_path / "html")], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    html = (tmp_path / "html" / "guide" / "cli.html").read_text(encoding="utf-8")
    assert 'id="nplm-train"' in html and "--keep-checkpoint" in html     # the parser's own help
    api = (tmp_path / "html" / "api.html").read_text(encoding="utf-8")
    assert not _undocumented(api)


def _undocumented(api_html):
    """Public names of nplm and kenlm methods of Model with no entry (an anchor) in the
    built API reference."""
    import re

    import kenlm

    import nplm
    anchors = set(re.findall(r'id="(nplm\.[\w.]+)"', api_html))
    wanted = {f"nplm.{name}" for name in nplm.__all__}
    wanted |= {f"nplm.Model.{name}" for name in dir(kenlm.Model) if not name.startswith("_")}
    return sorted(wanted - anchors)


def test_a_name_missing_from_the_api_reference_is_noticed():
    api = '<dt id="nplm.Model"></dt><dt id="nplm.Model.score"></dt>'
    missing = _undocumented(api)
    assert "nplm.rescore" in missing and "nplm.Model.BaseScore" in missing and "nplm.Model.score" not in missing


def test_benchmarks_page_is_generated_from_the_results():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "docs_benchmarks.py"), "--check"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_every_benchmark_table_says_when_where_and_how(tmp_path):
    import json
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_benchmarks
    finally:
        sys.path.pop(0)
    result = {"title": "T", "date": "2026-01-01 00:00 UTC", "commit": "abc", "cpu": "Some CPU", "cpus": 2,
              "command": "python tools/bench_x.py --repeat 3",
              "tables": [{"columns": ["a", "b"], "rows": [["x", 1.5], ["y", float("nan")]]}]}
    (tmp_path / "x.json").write_text(json.dumps(result))
    page = docs_benchmarks.render(tmp_path)
    assert "Measured 2026-01-01 00:00 UTC on commit `abc`, Some CPU (2 CPUs), by " \
           "`python tools/bench_x.py --repeat 3`" in page
    assert "| x | 1.5 |" in page and "| y | – |" in page
