#!/usr/bin/env bash
# wheel-check.sh -- build the release artefacts and prove the wheel on its own.
#
# 1. `python -m build`: an sdist and a wheel in dist/; `twine check` on both.
# 2. The wheel holds the package and its metadata, nothing else (no tests/, docs/, ci/).
# 3. A fresh virtual environment installs the wheel (not the checkout), and an example
#    runs from a directory outside the source tree: under the laptop default and under
#    `hpcfutures run -n 4`.
#
# Settings (environment): PYTHON=python (builds, and makes the fresh environment).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python}
LOG_TAG=wheel-check
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

work=$(mktemp -d /tmp/hpcfutures-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT

log "building the sdist and the wheel"
"$PYTHON" -m build --outdir "$work/dist" . > "$work/build.log" 2>&1 || {
  tail -n 30 "$work/build.log" >&2; die "python -m build failed"; }
"$PYTHON" -m twine check --strict "$work"/dist/* || die "twine check failed"
wheel=$(ls "$work"/dist/*.whl)
log "built $(basename "$wheel") and $(basename "$(ls "$work"/dist/*.tar.gz)")"

log "the wheel holds the package and its metadata only"
"$PYTHON" - "$wheel" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
outside = [n for n in names if not n.startswith(("hpcfutures/", "hpcfutures-"))]
assert not outside, f"the wheel holds files outside the package: {outside[:10]}"
assert "hpcfutures/py.typed" in names, "the wheel has no py.typed marker"
assert any(n.endswith("/licenses/LICENSE") or n.endswith("/LICENSE") for n in names), \
    "the wheel carries no LICENSE"
print(f"{len(names)} files, all under hpcfutures/ or its dist-info")
EOF

log "a fresh environment with the wheel, an example outside the source tree"
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$wheel" || die "the wheel does not install"
mkdir "$work/run"
cp examples/monte_carlo.py "$work/run/"
cd "$work/run"
where=$("$work/venv/bin/python" -c 'import hpcfutures; print(hpcfutures.__file__)')
case "$where" in
  "$work/venv/"*) ;;
  *) die "hpcfutures was imported from $where, not from the wheel" ;;
esac
env -u PYTHONPATH timeout 180 "$work/venv/bin/python" monte_carlo.py \
  || die "the example failed on the laptop default"
env -u PYTHONPATH timeout 180 "$work/venv/bin/hpcfutures" run -n 4 \
  "$work/venv/bin/python" monte_carlo.py || die "the example failed under hpcfutures run -n 4"
log "the wheel installs and runs without the source tree"
