"""The benchmark harness runs and reports (benchmarks/run.py); speed itself is never asserted.

The laptop default and ProcessPoolExecutor are launched on a reduced workload; so are the
peers (Parsl, executorlib: the ``bench`` extra installs them, and the Slurm one needs
the local Slurm), each alone.  The other peers (dask-jobqueue, dask-mpi) are not needed.
"""

import importlib.util
import json
import sys

import pytest
from helpers import ROOT, require, run_job, slurm_is_up

sys.path.insert(0, str(ROOT))

from benchmarks import report, runners
from benchmarks.workload import QUICK, Sizes

HARNESS = ROOT / "benchmarks" / "run.py"
FIGURES = {"ready", "map", "map_chunked", "submit", "sleep", "payload", "short_sleep",
           "large_map_chunked", "shutdown", "total"}


@pytest.mark.timeout(90)
def test_quick_run_writes_the_table_and_the_json(tmp_path):
    results, tables = tmp_path / "results.json", tmp_path / "README.md"
    intro = ("# Results\n"
             "Between `<!-- benchmark-table:begin -->` and `<!-- benchmark-table:end -->`:\n")
    tables.write_text(intro + "<!-- benchmark-table:begin -->\nold\n"
                      "<!-- benchmark-table:end -->\nkept\n")
    job = run_job([sys.executable, HARNESS, "--repeat", "1", "--quick",
                   "--only", "hpcfutures-laptop,processpool",
                   "--json", results, "--markdown", tables], timeout=75)
    assert job.returncode == 0, job

    data = json.loads(results.read_text())
    assert set(data["runners"]) == {"hpcfutures-laptop", "processpool"}
    for name, result in data["runners"].items():
        assert result["status"] == "1/1", (name, result["status"], job)
        (run,) = result["runs"]
        assert run["error"] is None and run["bench"]["errors"] == [], run
        assert FIGURES <= set(run["figures"]) and FIGURES <= set(result["medians"])
        assert all(value > 0 for value in run["figures"].values()), run["figures"]
    assert data["meta"]["quick"] is True and data["sizes"]["trivial"] == QUICK.trivial
    assert {entry["target"] for entry in data["targets"]} and "hpcfutures-laptop" in data["ratios"]

    assert "| hpcfutures, `python job.py` (Executor(2)) | 1/1 |" in job.stdout
    assert "| ProcessPoolExecutor(2) | 1/1 |" in job.stdout
    assert "| target | reference (median) | laptop |" in job.stdout
    written = tables.read_text()
    assert written.startswith(intro + "<!-- benchmark-table:begin -->\nBenchmark of ")
    assert "old" not in written and written.endswith("<!-- benchmark-table:end -->\nkept\n")


#: What a peer whose ``map`` ignores ``chunksize`` measures: no chunked map.
UNCHUNKED = FIGURES - {"map_chunked", "large_map_chunked"} | {"round_trip", "round_trip_p90"}
#: What a peer that starts a process per call measures: the first task and the round trips.
PER_CALL = {"ready", "round_trip", "round_trip_p90", "shutdown", "total"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, package, measured", [
    ("parsl", "parsl", UNCHUNKED),
    ("executorlib", "executorlib", UNCHUNKED),
    ("executorlib-per-call", "executorlib", PER_CALL),
    pytest.param("executorlib-slurm", "executorlib", UNCHUNKED, marks=pytest.mark.slurm),
], ids=["parsl", "executorlib", "executorlib-per-call", "executorlib-slurm"])
def test_a_peer_runs_the_quick_workload(tmp_path, name, package, measured):
    """Each peer of issue 31 runs every step it can, its results checked, leaves no process
    behind (Parsl's interchange and worker pool, executorlib's srun steps), and the table
    says why the other steps are n/a."""
    require(importlib.util.find_spec(package) is not None, f"{package} (pip install {package})")
    if name.endswith("-slurm"):
        require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    results = tmp_path / "results.json"
    job = run_job([sys.executable, HARNESS, "--repeat", "1", "--quick", "--only", name,
                   "--timeout", "45", "--json", results], timeout=55)
    assert job.returncode == 0, job
    result = json.loads(results.read_text())["runners"][name]
    assert result["status"] == "1/1", (result["status"], job)
    (run,) = result["runs"]
    assert run["bench"]["errors"] == [] and run["leftovers"] == [], run
    assert measured <= set(run["figures"]), run["figures"]
    assert not {"map_chunked", "large_map_chunked"} & set(run["figures"]), run["figures"]
    assert all(value > 0 for value in run["figures"].values()), run["figures"]
    assert f"| {result['title']} | 1/1 |" in job.stdout
    assert result["cannot"] and all(f"- {result['title']}: {why}" in job.stdout
                                    for why in result["cannot"]), job.stdout


@pytest.mark.timeout(30)
def test_unknown_runner_is_refused(tmp_path):
    job = run_job([sys.executable, HARNESS, "--only", "hpcfutures-laptop,nope",
                   "--json", tmp_path / "r.json"], timeout=25)
    assert job.returncode == 2 and "unknown runner(s) nope" in job.stderr, job
    assert not (tmp_path / "r.json").exists()


def test_a_missing_peer_is_reported_as_not_installed():
    check = runners._module("hpcfutures_no_such_peer", "no-such-peer")
    assert check() == "not installed: pip install no-such-peer"


def _result(name, is_hpcfutures, medians, unavailable=None):
    return {"name": name, "title": name, "short": name, "is_hpcfutures": is_hpcfutures,
            "unavailable": unavailable, "status": unavailable or "1/1", "runs": [],
            "medians": medians}


def test_targets_compare_hpcfutures_with_each_peer():
    results = {
        "hpcf": _result("hpcf", True, {"map": 5000.0, "sleep": 1.2, "ready": 0.5,
                                       "shutdown": 0.1, "total": 2.0}),
        "mpi4py-futures": _result("mpi4py-futures", False, {"map": 4000.0}),
        "slurmrunner": _result("slurmrunner", False, {}, "not installed: pip install x"),
        "parsl": {**_result("parsl", False, {"map": 800.0}), "cannot": ["no chunks: why"]},
    }
    targets = {entry["metric"] + ":" + str(entry["peer"]): entry["runners"]["hpcf"]
               for entry in report.evaluate_targets(results, Sizes())}
    assert targets["map:mpi4py-futures"] == {"value": 5000.0, "compared": 1.25, "met": True}
    assert targets["sleep:None"]["met"] is False                  # 1.2 s > 1.08 s
    assert targets["shutdown:None"]["met"] is True
    assert targets["ready:slurmrunner"]["met"] is None            # peer not installed
    text = report.markdown(results, report.evaluate_targets(results, Sizes()),
                           Sizes(), {"date": "d", "machine": "m", "command": "c",
                                            "repeat": 1})
    assert "| slurmrunner | not installed: pip install x |" in text
    assert "\n- parsl: no chunks: why\n" in text                   # a peer's n/a explained
    assert "1.25× met" in text and "1.200 s **not met**" in text  # noqa: RUF001 (as printed)
    assert ("| ready ≤ 0.7× SLURMRunner | slurmrunner: not installed: pip install x |"  # noqa: RUF001
            in text)


@pytest.mark.timeout(120)
def test_the_floors_script_prints_every_floor():
    """benchmarks/floors.py measures what no executor goes below here (issue 21's proofs);
    its figures are not asserted, only that each one is measured and printed."""
    job = run_job([sys.executable, ROOT / "benchmarks" / "floors.py", "--quick"], timeout=100)
    assert job.returncode == 0, job
    rows = [line for line in job.stdout.splitlines() if line.startswith("| ")][1:]
    labels = [row.split(" | ")[0] for row in rows]
    assert len(rows) == 13, job.stdout
    assert any("alone in one process" in label for label in labels)
    assert sum("the busiest worker's own calls" in label for label in labels) == 2
    assert sum("last line to exit" in label for label in labels) == 3
    assert any("one round trip" in label for label in labels)
    assert sum("through Dask's scheduler, Dask alone" in label for label in labels) == 2
    assert sum("under `hpcfutures run -n 4`" in label for label in labels) == 1
    assert all(row.rstrip(" |").split(" | ")[1] for row in rows), job.stdout


@pytest.mark.timeout(150)
def test_the_memory_script_measures_both_sides(tmp_path):
    """benchmarks/memory.py (issue 26's client-side targets): held submits, a large
    map beside ProcessPoolExecutor's best chunksize, an endless map with buffersize,
    a journal's rerun; each figure measured and printed, none asserted."""
    out = tmp_path / "memory.json"
    job = run_job([sys.executable, ROOT / "benchmarks" / "memory.py", "--quick", "--json", out],
                  timeout=140)
    assert job.returncode == 0, job
    results = json.loads(out.read_text())["results"]
    for key in ("submit-hpcfutures", "submit-processpool", "map-hpcfutures", "map-processpool",
                "endless-hpcfutures", "journal-build", "journal-rerun"):
        assert "error" not in results[key], (key, results[key])
    assert results["endless-hpcfutures"]["consumed"] > 1000, results
    assert results["journal-rerun"]["first_s"] <= results["journal-rerun"]["seconds"], results
    for row in ("submits held", "endless map", "journal of 20,000 results", "rerun"):
        assert row in job.stdout, job.stdout


@pytest.mark.timeout(120)
def test_dask_collections_compute_on_each_scheduler_with_right_results():
    """benchmarks/dask_collections.py --quick: every row computed, every result checked
    against Dask's sync scheduler (the script fails on a wrong one)."""
    job = run_job([sys.executable, ROOT / "benchmarks" / "dask_collections.py", "--quick"],
                  timeout=100)
    assert job.returncode == 0, job
    assert "| array |" in job.stdout and "| dataframe |" in job.stdout, job
