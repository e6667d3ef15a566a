#!/bin/bash
# A batch job whose tasks serve work sent from outside the job: a notebook, the login node.
#
#   sbatch examples/serve_job.sh          (from the repository root)
#
# Every task serves: rank 0 runs the Dask scheduler, the others are Dask
# workers, and none runs code of yours.  The scheduler writes its address and
# TLS credentials to a private file (mode 0600) that clients connect through:
#
#   python examples/offload_from_login_node.py ~/hpcfutures-<job id>.json
#
# A client leaving does not end the job.  It ends, with every task exiting 0,
# on `hpcfutures stop FILE` (or `ex.stop_allocation()` in a client), on
# scancel or the time limit, or once no client was connected for 30 minutes.
#SBATCH --job-name=hpcfutures-serve
#SBATCH --ntasks=4
#SBATCH --cpus-per-task=1
#SBATCH --time=01:00:00
#SBATCH --output=slurm-output/hpcfutures-serve-%j.out
set -euo pipefail

# A path the clients can name in advance, on a filesystem they share with the
# job; set HPCFUTURES_SCHEDULER_FILE before sbatch to choose another.
FILE="${HPCFUTURES_SCHEDULER_FILE:-$HOME/hpcfutures-$SLURM_JOB_ID.json}"

srun python3 -m hpcfutures serve --scheduler-file "$FILE" --idle-timeout 1800
