"""pytest's hooks and shared fixtures; the shared machinery is in helpers.py (and waiting.py)."""

from __future__ import annotations

import os
import sys

import pace
import pytest
from helpers import (
    FAILURE_TIMES,
    LAUNCHERS,
    Batch,
    Launch,
    assert_no_leftovers,
    have_mpi,
    require,
    slurm_is_up,
)


def pytest_configure(config) -> None:
    """Measure the run's slowdown factor once (:mod:`pace`), before any test starts, and
    give the run Ctrl-C's usual action (:func:`_ctrl_c_as_usual`)."""
    _ctrl_c_as_usual()
    if pace.VARIABLE not in os.environ:
        os.environ[pace.VARIABLE] = str(pace.measure())


def _ctrl_c_as_usual() -> None:
    """A run started in the background by a script (``pytest &``, ``nohup ... &``) has
    SIGINT ignored, as a shell without job control starts background commands, and so
    has every process it starts (an ignored signal stays ignored across exec, and Python
    then leaves it so): the tests that stop a launch with Ctrl-C, or check that a helper
    dies of one, would wait for an end that cannot come.  With Python's own handler in
    the run, the processes it starts begin with SIGINT's default action, as from a
    terminal."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def pytest_report_header(config) -> str:
    return (f"slowdown factor {pace.slowdown():g} ({pace.VARIABLE}): every wall-clock bound "
            "and timeout is stretched by it")


#: Tier 1: in-process and deterministic (units, the Dask seams, the executor contract on
#: the laptop executor, the engine with fake clocks).  Whole modules, or single tests.
TIER_1 = {
    "test_api", "test_batching", "test_bind_address", "test_config", "test_contract_local",
    "test_dask_seams", "test_lone_calls", "test_express", "test_futures", "test_house",
    "test_initializer", "test_launcher_env", "test_loop_thread", "test_machinery", "test_roles",
    "test_scale", "test_scale_scheduler", "test_schedfile", "test_security", "test_shipping",
    "test_slurm_env", "test_cli", "test_crashes", "test_draining", "test_journal",
    "test_ending", "test_import_changes_nothing",
}
#: Tier 3 (marked ``slow``): faults, signals, promptness, scale and benchmark smoke tests.
#: A module here is tier 3 but for its units (what does not launch), which are tier 1.
TIER_3 = {
    "test_benchmarks", "test_failures", "test_faults", "test_memory", "test_scale_limits",
    "test_scale_real", "test_signals", "test_interleave",
    # A call that kills its worker; the allocation's end, draining and requeueing; the
    # launch's status when its client fails; idle workers released promptly.
    "test_crashes", "test_draining", "test_client_status", "test_release",
}
#: Fixtures and markers that mean a real launch (so at least tier 2).
LAUNCHING = {"launcher", "launches", "batch", "array", "real_slurm", "real_mpi", "slurm_env"}
BACKENDS = {"slurm", "mpi", "multinode", "ssh_lab"}


#: Tests of tier 3 modules that are tier 1 (a unit beside the launches).
TIER_1_TESTS = {
    "test_a_seed_draws_the_same_launch_every_time",
    "test_the_short_form_meets_a_rank_that_starts_after_the_end",
}
#: Tests of other modules that are tier 3: faults, time limits, benchmark smoke runs.
TIER_3_TESTS = {
    "test_the_scale_harness_runs_small_and_prints_its_table",  # benchmark smoke
    "test_the_storage_benchmark_compares_the_settings_beside_numpy",  # benchmark smoke
    "test_a_slurm_job_drains_requeues_itself_and_completes_every_item_once",  # time limit
    "test_an_h_rt_job_drains_exits_99_and_its_rerun_completes_every_item_once",  # time limit
    "test_tasks_whose_scheduler_task_was_deleted_end_within_a_minute",  # fault
    "test_array_whose_scheduler_element_never_starts_ends_within_a_minute",  # fault
    "test_allocate_scale_die_and_submit_wait_on_slurm",  # fault: a worker job dies
    "test_a_worker_that_comes_after_the_end_leaves_with_status_0",  # promptness: late rank
    "test_contract_on_sixteen_oversubscribed_ranks",  # scale
    "test_run_ends_copies_that_ignore_a_forwarded_signal",  # signals
    "test_run_forwards_signals_and_everything_stops",  # signals
}


def tier_of(item) -> int:
    """The tier a collected test belongs to (see TIER_1, TIER_3); 2 by default."""
    module = item.module.__name__.rpartition(".")[2]
    name = item.name.split("[")[0]
    if name in TIER_1_TESTS:
        return 1
    if name in TIER_3_TESTS or item.get_closest_marker("slow"):
        return 3
    launching = LAUNCHING & set(getattr(item, "fixturenames", ())) or any(
        item.get_closest_marker(name) for name in BACKENDS)
    if module in TIER_3:
        return 3 if launching or module not in TIER_1 else 1
    return 1 if module in TIER_1 and not launching else 2


#: Modules that share one backend's global state, so that a parallel run (pytest-xdist,
#: ``-n``) never runs their tests at the same time: the 3-node cluster, whose network
#: some tests change and whose queue test_ssh_lab clears between tests; and the tests
#: that check the local Slurm queue holds no job of a name (``hpcfutures``,
#: ``hpcfutures-w``) that another module's allocation also uses.
SHARED_BACKENDS = {
    "test_multinode": "cluster-mn", "test_ssh_lab": "cluster-mn",
    "test_allocate": "slurm-queue", "test_resources": "slurm-queue",
    "test_versions": "slurm-queue", "test_examples": "slurm-queue",
    "test_release": "slurm-queue", "test_serve": "slurm-queue",
}


def group_of(nodeid: str) -> str:
    """The group whose tests one test process runs, one after another, in a parallel
    run: the test's module, or the backend it shares with other modules
    (:data:`SHARED_BACKENDS`)."""
    module = nodeid.split("::")[0].rpartition("/")[2].removesuffix(".py")
    return SHARED_BACKENDS.get(module, module)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown where it is not installed
def pytest_xdist_make_scheduler(config, log):
    """Parallel runs hand each test process whole groups (:func:`group_of`): xdist's own
    ``loadscope`` scheduling, with our groups for its scopes."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ByGroup(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    """Give each test its tier's marker (``tier1``, ``tier2``, or ``slow``), and stretch
    every test's timeout (its marker, else the ini's) by the slowdown factor."""
    default = float(config.getini("timeout") or 0)
    for item in items:
        tier = tier_of(item)
        item.add_marker({1: "tier1", 2: "tier2", 3: "slow"}[tier])
        marker = item.get_closest_marker("timeout")
        seconds = float(marker.args[0]) if marker and marker.args else default
        if seconds:
            item.add_marker(pytest.mark.timeout(pace.scaled(seconds)), append=False)


@pytest.fixture
def batch(tmp_path, env):
    """sbatch for one test, with the test module's ``env``; its jobs are cancelled,
    shown (when the test failed) and checked for leftover processes after it."""
    jobs = Batch(tmp_path, env)
    yield jobs
    jobs.cancel_all()
    print(jobs.outputs())
    assert_no_leftovers(jobs.marker, grace=15)


#: The failure matrix's times as the reports brought them: from this process, or from
#: the test processes of a parallel run (pytest-xdist), which send their reports here.
_REPORTED_TIMES: list[tuple[str, str, float]] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the failure times a test measured to its report, so that they reach the
    process that prints the table, in a parallel run too."""
    report = yield
    if call.when == "teardown":
        report.user_properties.extend(("failure time", entry) for entry in FAILURE_TIMES)
        FAILURE_TIMES.clear()
    return report


def pytest_runtest_logreport(report) -> None:
    _REPORTED_TIMES.extend(tuple(value) for key, value in report.user_properties
                           if key == "failure time")


def pytest_terminal_summary(terminalreporter) -> None:
    """The failure matrix's measured times, one row per fault, one column per launcher."""
    if not _REPORTED_TIMES:
        return
    order = ["laptop", "run", "srun", "mpiexec"]
    launchers = sorted({launcher for _, launcher, _ in _REPORTED_TIMES},
                       key=lambda name: (order.index(name) if name in order else 9, name))
    rows: dict[str, dict[str, float]] = {}
    for row, launcher, seconds in _REPORTED_TIMES:
        rows.setdefault(row, {})[launcher] = seconds
    write = terminalreporter.write_line
    terminalreporter.section("failure matrix: seconds from the fault to its outcome")
    write("| fault | " + " | ".join(launchers) + " |")
    write("|---|" + "---|" * len(launchers))
    for row, times in rows.items():
        cells = [f"{times[name]:.2f}" if name in times else "" for name in launchers]
        write(f"| {row} | " + " | ".join(cells) + " |")


@pytest.fixture(params=LAUNCHERS)
def launcher(request) -> str:
    if request.param == "srun":
        require(slurm_is_up(), "a running Slurm cluster (bash ci/slurm-up.sh)")
    if request.param == "mpiexec":
        require(have_mpi(), "mpiexec with mpi4py (python -m pip install mpi4py mpich)")
    return request.param


@pytest.fixture
def launches():
    """Launches of one test; each is ended, shown and checked for leftovers after it."""
    started: list[Launch] = []

    def start(*args, **kwargs) -> Launch:
        started.append(Launch(*args, **kwargs))
        return started[-1]

    yield start
    for launch in started:
        launch.close()


# Cubed supports Python 3.11 and later (pyproject.toml installs it there only): on 3.10
# its tests do not apply, so they are not collected rather than skipped or failed.
collect_ignore = ["test_cubed.py"] if sys.version_info < (3, 11) else []
