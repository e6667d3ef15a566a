#!/bin/bash
# The Grid Engine form of slurm_requeue.sh: a sweep longer than its h_rt drains before
# the limit, exits 99 so that Grid Engine runs the job again, and each rerun resumes
# from the journal until every call is done.
#
#   qsub examples/sge_requeue.sh          (from the repository root)
#
#   Executor(journal=..., requeue=True)  records every result as it arrives; before h_rt
#                                        it stops sending calls, lets the running ones
#                                        finish, then leaves with exit status 99
#   #$ -r y                              lets Grid Engine run the job again
# A rerun (RESTARTED=1) skips every call the journal holds; max_requeues (3) stops it after
# three runs in a row that recorded nothing new.
#$ -N hpcfutures-requeue
#$ -cwd
#$ -j y
#$ -r y
#$ -l h_rt=0:2:0
#$ -pe smp 4
#$ -S /bin/bash
set -euo pipefail

echo "job $JOB_ID, restarted: ${RESTARTED:-0}"
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
