#!/bin/bash
# A batch job that runs examples/slurm_sweep.py on every task of its allocation.
#
#   sbatch examples/slurm_job.sh          (from the repository root)
#
# srun starts the script once per task: rank 0 runs the Dask scheduler, rank 1
# your code, the others are workers.  Without srun, `python3 ...` here would be
# a single process using only this node's CPUs (hpcfutures says so in a warning).
#SBATCH --job-name=hpcfutures-sweep
#SBATCH --ntasks=4
#SBATCH --cpus-per-task=1
#SBATCH --time=00:10:00
#SBATCH --output=slurm-output/hpcfutures-sweep-%j.out
set -euo pipefail

# The scheduler's address travels through a private file; the default lives
# in ~/.hpcfutures (which every node of the job must see).  On a shared
# scratch filesystem you may prefer, e.g.:
# export HPCFUTURES_SCHEDULER_FILE="/scratch/$USER/hpcfutures-{job_id}.{step_id}.json"

# To survive the time limit, record each result as it arrives: submitting the
# script again then computes only what is missing (docs/resuming.rst).
# export HPCFUTURES_JOURNAL="$HOME/journals/hpcfutures-sweep"

srun python3 examples/slurm_sweep.py
