# %% [markdown]
# # Workers from the batch system, from a notebook
#
# Run it cell by cell in Jupyter (or `python examples/allocate_notebook.py` on a login node).
# `hpcfutures.allocate` submits a serving job (sbatch, qsub or bsub, whichever is here), waits
# until it serves, and hands back an ordinary `concurrent.futures` executor.  Functions
# defined here travel by value, so the job needs nothing of this file.

# %%
import concurrent.futures as cf
import random
import socket

import hpcfutures


def estimate_pi(seed, samples=200_000):
    rng = random.Random(seed)
    inside = sum(rng.random() ** 2 + rng.random() ** 2 <= 1.0 for _ in range(samples))
    return 4.0 * inside / samples, socket.gethostname()


# %% [markdown]
# Ask for one node with 4 tasks (a scheduler and 3 workers) for 20 minutes.  Add
# `partition=`, `account=`, `memory=` or `directives=["#SBATCH --constraint=..."]` for your site;
# `queue_timeout=` gives up (and cancels the job) if the queue is too slow.

# %%
ex = hpcfutures.allocate(nodes=1, tasks_per_node=4, time="00:20:00", queue_timeout="10min",
                         release_idle_after="2min")
print(f"{ex.allocation} serves; its output goes to {ex.allocation.output}")

# %%
futures = [ex.submit(estimate_pi, seed) for seed in range(32)]
values = [future.result()[0] for future in cf.as_completed(futures)]
print(f"pi ~= {sum(values) / len(values):.4f} from {len(values)} tasks")

# %% [markdown]
# More workers: two worker jobs (a job array) join the same scheduler.  Idle ones leave by
# themselves after `release_idle_after`; `ex.adapt(minimum=0, maximum=4)` would add and drop
# them as calls wait.

# %%
ex.scale(2)
print(sorted(ex.map(estimate_pi, range(64)))[0])
print(f"{ex.workers()} workers connected")

# %% [markdown]
# Done: stopping the executor stops the job and the worker jobs; nothing stays in the queue.

# %%
ex.shutdown()
