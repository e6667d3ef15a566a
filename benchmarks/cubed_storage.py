"""What Cubed's intermediate storage costs on hpcfutures, and which settings help (issue 31).

Cubed writes every intermediate array to Zarr files under ``work_dir`` and its
next operation reads them back; a computation on an allocation spends a large
part of its time there.  This runs one computation (random floats: a matrix
product, then column means) on ``hpcfutures.Executor(2)`` through
``hpcfutures.cubed.HPCFuturesDagExecutor`` under several storage settings,
interleaved, and prints the medians:

==========================  ===============================================================
``zarr``                    Cubed's defaults (no ``zarr_compressor`` given), ``work_dir`` on
                            disk; with zarr-python 3 installed Cubed stores through it
``zarr, node-local``        the same, ``work_dir`` in ``/dev/shm`` (memory: what a node-local
                            scratch gives when every worker is on one node)
``zarr, no compr.``         ``zarr_compressor=None`` (Cubed 0.28 or later, which needs Python
                            3.12: Cubed 0.27's zarr-python-3 store passes no compressor to Zarr,
                            so there it would change nothing)
``tensorstore``             ``CUBED_STORAGE_NAME=tensorstore``, Cubed's default compressor
``tensorstore, no compr.``  ``CUBED_STORAGE_NAME=tensorstore``, ``zarr_compressor=None``
==========================  ===============================================================

Cubed's default compressor is spelled ``"default"`` in 0.27 and ``"auto"`` in 0.28,
and Cubed 0.28 hands it to Zarr (which rejects the other spelling), so the rows with
the default leave ``zarr_compressor`` out. TensorStore (``pip install tensorstore``)
honours the setting in both versions.  Each computation runs on a fresh
``hpcfutures.Executor(2)`` (the storage is chosen by an environment variable the
workers read), timed from ``compute()`` to its result.

and, beside them, the same arithmetic done by NumPy in this process on the
whole arrays (no storage, no tasks): what the computation costs without Cubed.
``--files`` also runs the default once under ``strace -f`` and counts, per task,
the files the workers open or look for under ``work_dir`` and how many of those
do not exist (Zarr probing for metadata files of another format).

    python benchmarks/cubed_storage.py [--repeat 3] [--size 2000] [--chunk 500] [--files]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

#: Cubed's own default compressor: zarr_compressor is left out of the Spec.
CUBEDS_DEFAULT = "Cubed's default"

#: name -> (Cubed's storage, compressor, where work_dir goes: "disk" or "memory")
VARIANTS: dict[str, tuple[str | None, str | None, str]] = {
    "zarr": (None, CUBEDS_DEFAULT, "disk"),
    "zarr, node-local": (None, CUBEDS_DEFAULT, "memory"),
    "zarr, no compr.": (None, None, "disk"),
    "tensorstore": ("tensorstore", CUBEDS_DEFAULT, "disk"),
    "tensorstore, no compr.": ("tensorstore", None, "disk"),
}


@contextlib.contextmanager
def _work_dir(where: str) -> Iterator[str]:
    base = "/dev/shm" if where == "memory" and os.path.isdir("/dev/shm") else None
    path = tempfile.mkdtemp(prefix="hpcf-cubed-", dir=base)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _workload(xp, a):
    """The computation: a product of the matrix with its transpose, then column means."""
    return xp.mean(xp.matmul(a, xp.permute_dims(a, (1, 0))), axis=0)


def available(name: str) -> str | None:
    """Why variant ``name`` cannot run here, or None."""
    storage, compressor, _ = VARIANTS[name]
    if storage is None and compressor is None and not _zarr_store_honours_compressor():
        return "Cubed 0.27 passes no compressor to zarr-python 3: needs Cubed 0.28 (Python 3.12)"
    if storage == "tensorstore":
        try:
            import tensorstore  # noqa: F401
        except ImportError:
            return "not installed: pip install tensorstore"
    return None


def _zarr_store_honours_compressor() -> bool:
    """Whether this Cubed hands ``zarr_compressor`` to zarr-python 3 (0.28 on; its
    default compressor is then spelled "auto")."""
    import inspect

    import cubed

    return inspect.signature(cubed.Spec).parameters["zarr_compressor"].default == "auto"


def run_variant(name: str, size: int, chunk: int) -> dict[str, float]:
    """One computation under the storage setting ``name``, on a fresh executor: its
    seconds, the tasks' own seconds on the workers (summed), tasks and bytes written."""
    storage = VARIANTS[name][0]
    if storage is None:
        os.environ.pop("CUBED_STORAGE_NAME", None)
    else:
        os.environ["CUBED_STORAGE_NAME"] = storage  # read by the workers as they start
    import cubed

    cubed.config.refresh()
    import hpcfutures

    with hpcfutures.Executor(2) as ex:
        return _computed(ex, name, size, chunk)


def _computed(ex, name: str, size: int, chunk: int) -> dict[str, float]:
    import cubed
    import cubed.array_api as xp
    import cubed.random
    from cubed.runtime.types import Callback

    from hpcfutures.cubed import HPCFuturesDagExecutor

    class Tasks(Callback):
        def __init__(self) -> None:
            self.count, self.busy = 0, 0.0

        def on_task_end(self, event) -> None:
            self.count += event.num_tasks
            if event.function_start_tstamp and event.function_end_tstamp:
                self.busy += event.function_end_tstamp - event.function_start_tstamp

    _, compressor, where = VARIANTS[name]
    with _work_dir(where) as work_dir:
        chosen = {} if compressor == CUBEDS_DEFAULT else {"zarr_compressor": compressor}
        spec = cubed.Spec(work_dir=work_dir, allowed_mem="600MB",
                          executor=HPCFuturesDagExecutor(ex), **chosen)
        a = cubed.random.random((size, size), chunks=(chunk, chunk), spec=spec)
        tasks = Tasks()
        started = time.perf_counter()
        _workload(xp, a).compute(callbacks=[tasks])
        seconds = time.perf_counter() - started
        written = sum(f.stat().st_size for f in Path(work_dir).rglob("*") if f.is_file())
    return {"s": seconds, "task_s": tasks.busy, "tasks": tasks.count, "bytes": written}


def numpy_seconds(size: int) -> float:
    """The same arithmetic on whole NumPy arrays in this process (one thread)."""
    import numpy as np

    a = np.random.default_rng(1).random((size, size))
    started = time.perf_counter()
    (a @ a.T).mean(axis=0)
    return time.perf_counter() - started


def count_files(size: int, chunk: int) -> str:
    """Run the default (``zarr``) once under ``strace -f``: per task, files opened or looked
    for under work_dir, and those missing."""
    if shutil.which("strace") is None:
        return "strace is not installed (apt-get install strace): file counts skipped"
    with tempfile.TemporaryDirectory() as scratch:
        trace = Path(scratch) / "trace"
        command = ["strace", "-f", "-qq", "-e", "trace=openat,newfstatat,statx,stat,lstat",
                   "-o", str(trace), sys.executable, __file__, "--one", "zarr",
                   "--size", str(size), "--chunk", str(chunk)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            return f"strace run failed: {done.stderr[-500:]}"
        tasks = int(re.search(r"tasks=(\d+)", done.stdout)[1])
        seen: Counter[str] = Counter()
        missing: Counter[str] = Counter()
        for line in trace.read_text(errors="replace").splitlines():
            found = re.search(r'"([^"]*hpcf-cubed-[^"]*)"', line)
            if not found:
                continue
            name = Path(found[1]).name
            kind = name if name.startswith((".z", "zarr.json")) else "chunk or directory"
            seen[kind] += 1
            if "ENOENT" in line:
                missing[kind] += 1
    lines = [f"file-system calls under work_dir per task ({tasks} tasks, `strace -f`):",
             "", "| file | calls per task | of which missing |", "|---|---|---|"]
    for kind, calls in seen.most_common():
        lines.append(f"| `{kind}` | {calls / tasks:.1f} | {missing[kind] / tasks:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size", type=int, default=2000, help="the matrix is size x size")
    parser.add_argument("--chunk", type=int, default=500, help="chunks are chunk x chunk")
    parser.add_argument("--files", action="store_true", help="also count file-system calls")
    parser.add_argument("--one", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.one:  # one computation, for --files (under strace)
        figures = run_variant(args.one, args.size, args.chunk)
        print(f"tasks={figures['tasks']}")
        return 0

    names = [name for name in VARIANTS if available(name) is None]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for repetition in range(args.repeat):
        shift = repetition % len(names)
        for name in names[shift:] + names[:shift]:
            runs[name].append(run_variant(name, args.size, args.chunk))
            print(f"[{repetition + 1}/{args.repeat}] {name}: {runs[name][-1]['s']:.2f} s",
                  file=sys.stderr)
    floor = statistics.median(numpy_seconds(args.size) for _ in range(args.repeat))

    first = statistics.median(r["s"] for r in runs["zarr"])
    print(f"Cubed {args.size}x{args.size} float64 (random), chunks {args.chunk}x{args.chunk}, "
          f"on hpcfutures.Executor(2); medians of {args.repeat} interleaved runs\n")
    print("| storage | compute s | ÷ zarr | tasks' own s (summed) | tasks | written MB |")
    print("|---|---|---|---|---|---|")
    for name in VARIANTS:
        if name not in runs:
            print(f"| {name} | {available(name)} | | | | |")
            continue
        figures = runs[name]
        seconds = statistics.median(r["s"] for r in figures)
        print(f"| {name} | {seconds:.2f} | {seconds / first:.2f} | "
              f"{statistics.median(r['task_s'] for r in figures):.2f} | "
              f"{int(figures[0]['tasks'])} | "
              f"{statistics.median(r['bytes'] for r in figures) / 1e6:.1f} |")
    print(f"| NumPy, whole arrays, this process | {floor:.2f} | {floor / first:.2f} | | | |")
    if args.files:
        print()
        print(count_files(args.size, args.chunk))
    return 0


if __name__ == "__main__":
    sys.exit(main())
