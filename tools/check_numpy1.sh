#!/usr/bin/env bash
# nplm beside a kenlm client that pins numpy<2: build nplm's wheel against numpy 2
# (its build requirement), install it with pyctcdecode and numpy 1.26 in one fresh
# environment (one resolver run: it must find a solution), then run the back-off
# kenlm-parity tests and pyctcdecode's decoder through nplm.install_as_kenlm() there.
#
#   bash tools/check_numpy1.sh            # NPLM_NUMPY1_VENV=DIR keeps the environment
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${NPLM_NUMPY1_VENV:-$(mktemp -d)/venv}"
WHEELS="$(mktemp -d)"
trap 'rm -rf "$WHEELS"' EXIT

python3 -m venv "$VENV"
# shellcheck disable=SC1091
source "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
python -m pip wheel --quiet --no-deps --wheel-dir "$WHEELS" "$REPO"
python -m pip install --quiet "$WHEELS"/nplm-*.whl "numpy>=1.26,<2" pyctcdecode kenlm pytest hypothesis

# Run from outside the clone, so that `import nplm` is the installed wheel.
cd "$WHEELS"
python - <<'PY'
import numpy, nplm, pyctcdecode  # noqa: F401
assert numpy.__version__.startswith("1."), numpy.__version__
assert "site-packages" in nplm.__file__, nplm.__file__
print(f"numpy {numpy.__version__}, nplm {nplm.__version__} from {nplm.__file__}")
PY
python "$REPO/tools/wheel_smoke.py"
pytest -q -p no:cacheprovider --rootdir "$REPO" \
    "$REPO/tests/backoff/test_backoff_kenlm.py" "$REPO/tests/test_kenlm_clients.py"
