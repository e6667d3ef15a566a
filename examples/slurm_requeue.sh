#!/bin/bash
# A sweep longer than its allocation: it drains before the time limit, requeues
# itself, and each rerun resumes from the journal until every call is done.
#
#   sbatch examples/slurm_requeue.sh          (from the repository root)
#
# The recipe is one keyword and one line:
#   Executor(journal=..., requeue=True)  records every result as it arrives; before the
#                                        job's end it stops sending calls, lets the running
#                                        ones finish, then runs `scontrol requeue`
#   #SBATCH --requeue                    lets Slurm put the job back in the queue
# A rerun skips every call the journal holds; max_requeues (3) stops it after three
# runs in a row that recorded nothing new (Slurm's MaxBatchRequeue caps it too).
# Slurm holds a requeued job back for about two minutes before it runs again.
#SBATCH --job-name=hpcfutures-requeue
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --time=00:02:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=hpcfutures-requeue-%j.out
set -euo pipefail

echo "run $((${SLURM_RESTART_COUNT:-0} + 1)) of job $SLURM_JOB_ID"
python3 - <<'PY'
import time

import hpcfutures


def simulate(k: int) -> int:
    time.sleep(10)  # a stand-in for ten seconds of real work
    return k * k


with hpcfutures.Executor(journal="~/.hpcfutures/journal-requeue-example",
                         requeue=True) as ex:
    results = list(ex.map(simulate, range(60)))
print(f"swept {len(results)} values; sum {sum(results)}")
PY
