#!/usr/bin/env bash
# sge-python.sh -- a Python for the Grid Engine tests' jobs, usable by the unprivileged job user.
#
# The tests submit their jobs as $SGE_JOB_USER (see ci/sge-up.sh), who cannot read a Python
# under /root (pyenv, the CI's own). This builds a virtual environment from the system's
# /usr/bin/python3 in a world-readable temporary directory, with what hpcfutures' jobs import
# (its dependencies, dask, mpi4py and the mpich wheel; not the optional extras such as cubed),
# at the versions the test interpreter has where the system Python can install them, else at
# the newest it can (the test interpreter may be newer: a package's release for it may not
# support the system Python). The tests put hpcfutures itself on PYTHONPATH.
# Idempotent: does nothing when the environment already has those versions. Run as root.
#
#   SGE_PYTHON_ENV=/tmp/hpcfutures-sge-python/venv   where the environment goes
#   SGE_PYTHON_REFERENCE=python                     the interpreter whose versions to copy
#   SGE_PIP_TIMEOUT=600                             seconds allowed for venv + pip install
# Prints the environment's python path on the last line.
set -euo pipefail

ENV_DIR=${SGE_PYTHON_ENV:-/tmp/hpcfutures-sge-python/venv}
REFERENCE=${SGE_PYTHON_REFERENCE:-python}
PIP_TIMEOUT=${SGE_PIP_TIMEOUT:-600}
BASE=/usr/bin/python3

LOG_TAG=sge-python
# shellcheck source=ci/lib.sh
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || die "run me as root"
# What hpcfutures imports (its pyproject dependencies and every third-party module its code
# imports, lazily imported ones such as mpi4py included, but not those of the optional
# features the jobs do not use: cubed, tqdm, bokeh), plus dask and the mpich wheel (mpiexec,
# for parallel-environment jobs) -- each at the reference's version.
pins=$("$REFERENCE" - "$(dirname "$0")/.." <<'EOF'
import ast, pathlib, re, sys
try:
    import tomllib
except ImportError:  # Python 3.10: the floor's interpreter
    tomllib = None
from importlib.metadata import PackageNotFoundError, packages_distributions, version
root = pathlib.Path(sys.argv[1])
wanted = {"dask", "mpich"}
def names(requirements):
    return {re.match(r"[A-Za-z0-9._-]+", requirement)[0].lower() for requirement in requirements}
if tomllib is not None:
    with open(root / "pyproject.toml", "rb") as handle:
        project = tomllib.load(handle)["project"]
    wanted |= names(project["dependencies"])
    unused = names(requirement for extra in ("cubed", "progress", "dashboard")
                   for requirement in project["optional-dependencies"][extra])
else:  # the same, from the file's text: one requirement per quoted string
    text = (root / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)[1]
    wanted |= names(re.findall(r'"([^"]+)"', block))
    unused = {"cubed", "tqdm", "bokeh"}
modules = set()
for path in (root / "hpcfutures").rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
owners = packages_distributions()
wanted |= {dist.lower() for module in modules for dist in owners.get(module, [])}
for name in sorted(wanted - unused - {"hpcfutures"}):
    try:
        print(f"{name}=={version(name)}")
    except PackageNotFoundError:
        pass  # not installed for the tests either (e.g. mpich off Linux)
EOF
) || die "cannot work out hpcfutures' dependencies with $REFERENCE"
pins=$(echo $pins)   # one line

if [ -x "$ENV_DIR/bin/python" ] && [ "$(cat "$ENV_DIR/.hpcfutures-pins" 2>/dev/null)" = "$pins" ]; then
  log "up to date: $pins"
  echo "$ENV_DIR/bin/python"
  exit 0
fi

if ! "$BASE" -c 'import ensurepip, venv' 2>/dev/null; then
  log "installing python3-venv"
  export DEBIAN_FRONTEND=noninteractive
  timeout "$PIP_TIMEOUT" apt-get install -y -q --no-install-recommends python3-venv >&2 ||
    { timeout "$PIP_TIMEOUT" apt-get update -q >&2 && \
      timeout "$PIP_TIMEOUT" apt-get install -y -q --no-install-recommends python3-venv >&2; } ||
    die "cannot install python3-venv"
fi

log "building $ENV_DIR with $pins"
rm -rf "$ENV_DIR"
mkdir -p "$(dirname "$ENV_DIR")"
timeout "$PIP_TIMEOUT" "$BASE" -m venv "$ENV_DIR" || die "python3 -m venv failed"
# shellcheck disable=SC2086
if ! timeout "$PIP_TIMEOUT" "$ENV_DIR/bin/python" -m pip install -q --disable-pip-version-check \
    $pins >&2; then
  # A version made for a newer Python than the system's: take what the system Python can run.
  unpinned=$(echo "$pins" | sed 's/==[^ ]*//g')
  log "$("$BASE" --version) cannot install all of $pins; installing $unpinned instead"
  # shellcheck disable=SC2086
  timeout "$PIP_TIMEOUT" "$ENV_DIR/bin/python" -m pip install -q --disable-pip-version-check \
    $unpinned >&2 || die "pip install $unpinned failed"
fi
echo "$pins" >"$ENV_DIR/.hpcfutures-pins"
chmod -R a+rX "$(dirname "$ENV_DIR")"
log "ready: $("$ENV_DIR/bin/python" -c 'import sys, distributed; print(sys.version.split()[0], "distributed", distributed.__version__)')"
echo "$ENV_DIR/bin/python"
