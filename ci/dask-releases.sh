#!/usr/bin/env bash
# dask-releases.sh -- prove hpcfutures against every distributed/dask release it allows.
#
# For each release: a virtual environment of its own holding that release of dask and
# distributed, the rest (pytest, cloudpickle, tornado, ...) read from the Python that runs
# this script; in it, the tests that pin where hpcfutures touches Dask's internals
# (tests/test_dask_seams.py), the executor contract on the laptop executor
# (tests/test_contract_local.py), and one real launch under `hpcfutures run -n 4`.
# A release that fails is named, and the script fails.
#
# Settings (environment):
#   PYTHON=python           the Python whose packages the environments share (.ci/venv's)
#   DASK_RELEASES="..."     the releases to prove (default: the list below)
#   DASK_RELEASES_DIR=.ci/dask-releases   where the environments go
#   DASK_RELEASES_AT_ONCE=3 how many releases are proven at the same time
set -euo pipefail
cd "$(dirname "$0")/.."

#: The floor (pyproject.toml's lower bound), one release per quarter or so, the newest.
DEFAULT_RELEASES="2025.9.0 2025.11.0 2026.1.3 2026.3.0 2026.6.0 2026.7.1 2026.8.0"
PYTHON=${PYTHON:-python}
RELEASES=${DASK_RELEASES:-$DEFAULT_RELEASES}
DIR=${DASK_RELEASES_DIR:-.ci/dask-releases}

LOG_TAG=dask-releases
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

shared=$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
mkdir -p "$DIR"

# prove RELEASE: make its environment (once), run the tests in it; status 0 if they pass.
prove() {
  local release=$1 env_dir="$DIR/$1" started=$SECONDS site got python_here
  if [ ! -x "$env_dir/bin/python" ]; then
    "$PYTHON" -m venv --without-pip "$env_dir"
    site="$env_dir/lib/python$version/site-packages"
    "$PYTHON" -m pip install -q --no-deps --target "$site" \
      "dask==$release" "distributed==$release"
    # Everything else from the shared environment, after this one's own packages.
    printf '%s\n' "$shared" > "$site/zz-shared-packages.pth"
  fi
  python_here="$env_dir/bin/python"
  got=$("$python_here" -c 'import dask, distributed; print(dask.__version__, distributed.__version__)')
  if [ "$got" != "$release $release" ]; then
    log "distributed $release: FAILED ($env_dir has dask/distributed $got)"
    return 1
  fi
  log "distributed $release: seams, the laptop contract, a launch under hpcfutures run -n 4"
  # The environment's own Python is sys.executable in the tests, so every process
  # they start (the launch's ranks included) runs on this release.
  if PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$python_here" -m pytest -q -p no:cacheprovider \
       -o addopts="" \
       tests/test_dask_seams.py tests/test_contract_local.py \
       "tests/test_local_launcher.py::test_contract_under_hpcfutures_run[4]" \
       > "$env_dir/pytest.log" 2>&1; then
    log "distributed $release: passed ($(tail -n 1 "$env_dir/pytest.log" | tr -d '='), $((SECONDS - started)) s)"
  else
    tail -n 40 "$env_dir/pytest.log" >&2
    log "distributed $release: FAILED (the log: $env_dir/pytest.log)"
    return 1
  fi
}

# Up to DASK_RELEASES_AT_ONCE releases at a time: their tests mostly wait (on launches,
# on timeouts the seams exercise), so three share two cores well.
at_once=${DASK_RELEASES_AT_ONCE:-3}
declare -A running=()   # pid -> release
failed=()
reap() {  # wait for one proof to end and note it if it failed
  local pid
  wait -n -p pid "${!running[@]}" || failed+=("${running[$pid]}")
  unset "running[$pid]"
}
for release in $RELEASES; do
  while [ ${#running[@]} -ge "$at_once" ]; do reap; done
  prove "$release" &
  running[$!]=$release
done
while [ ${#running[@]} -gt 0 ]; do reap; done
[ ${#failed[@]} -eq 0 ] || die "hpcfutures fails with distributed ${failed[*]}"
log "every release passed: $RELEASES"
