#!/bin/bash
# The same sweep as a job array: each element is one rank of one launch.
#
#   sbatch examples/slurm_array.sh        (from the repository root)
#
# Element 0 runs the Dask scheduler, element 1 your code, the rest are workers.
# The queue may start elements at different times: late ones join the running
# scheduler, and elements that start after your code has finished exit at once
# with status 0.  When your code finishes, elements still pending are cancelled.
#SBATCH --job-name=hpcfutures-array
#SBATCH --array=0-3
#SBATCH --ntasks=1
#SBATCH --time=00:10:00
#SBATCH --output=slurm-output/hpcfutures-array-%A_%a.out
set -euo pipefail

# How long an element waits for the others to start (default 3600 s).
export HPCFUTURES_ARRAY_TIMEOUT=${HPCFUTURES_ARRAY_TIMEOUT:-1800}
# Elements may run on different nodes, so hpcfutures binds to the node's default
# address; choose the network if that is not the fast one, e.g.:
# export HPCFUTURES_INTERFACE=ib0

python3 examples/slurm_sweep.py
