#!/bin/bash
# A narrowing reduction as a job array that gives back what it no longer uses.
#
#   sbatch examples/slurm_array_release.sh        (from the repository root)
#
# Element 0 runs the Dask scheduler, element 1 your code, elements 2-5 are
# workers.  A worker idle for HPCFUTURES_RELEASE_IDLE_AFTER seconds retires:
# the results it holds move to the others, its element ends COMPLETED and the
# cluster gets its CPUs back, while the scheduler and your code go on.  At
# least HPCFUTURES_MIN_WORKERS workers stay until the end.
#SBATCH --job-name=hpcfutures-release
#SBATCH --array=0-5
#SBATCH --ntasks=1
#SBATCH --time=00:10:00
#SBATCH --output=slurm-output/hpcfutures-release-%A_%a.out
set -euo pipefail

export HPCFUTURES_RELEASE_IDLE_AFTER=${HPCFUTURES_RELEASE_IDLE_AFTER:-2}
export HPCFUTURES_MIN_WORKERS=${HPCFUTURES_MIN_WORKERS:-1}
export HPCFUTURES_ARRAY_TIMEOUT=${HPCFUTURES_ARRAY_TIMEOUT:-1800}

python3 examples/tree_reduction.py
