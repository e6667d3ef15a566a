"""Role negotiation against a fake world: no processes, no Dask."""

import pytest

from hpcfutures import NotEnoughRanksError
from hpcfutures._launch.plan import bind_address, negotiate
from hpcfutures._launch.roles import Role, assign_role
from hpcfutures._support.config import resolve_settings
from hpcfutures.launchers import Identity


@pytest.mark.parametrize("size", [3, 4, 8, 64])
def test_default_layout_scheduler_client_workers(size):
    roles = [assign_role(rank, size, scheduler_in_client=False) for rank in range(size)]
    assert roles[0] is Role.SCHEDULER
    assert roles[1] is Role.CLIENT
    assert roles[2:] == [Role.WORKER] * (size - 2)


@pytest.mark.parametrize("size", [2, 3, 5])
def test_scheduler_in_client_spends_no_rank_on_the_scheduler(size):
    roles = [assign_role(rank, size, scheduler_in_client=True) for rank in range(size)]
    assert roles[0] is Role.CLIENT
    assert roles[1:] == [Role.WORKER] * (size - 1)


def test_one_process_runs_standalone():
    assert assign_role(0, 1, scheduler_in_client=False) is Role.STANDALONE


def test_too_few_ranks_says_how_many_and_what_to_do():
    with pytest.raises(NotEnoughRanksError) as info:
        assign_role(0, 2, scheduler_in_client=False)
    message = str(info.value)
    assert "at least 3" in message and "scheduler_in_client" in message
    with pytest.raises(ValueError):  # also a ValueError for callers that catch that
        assign_role(1, 2, scheduler_in_client=False)


def test_identity_validates_rank_and_size():
    with pytest.raises(ValueError, match="outside"):
        Identity(launcher="x", rank=4, size=4, launch_id="l")
    with pytest.raises(ValueError, match="at least 1"):
        Identity(launcher="x", rank=0, size=0, launch_id="l")


def local_env(rank, size, launch="abc123"):
    return {"HPCFUTURES_RANK": str(rank), "HPCFUTURES_SIZE": str(size),
            "HPCFUTURES_LAUNCH_ID": launch}


def test_local_launcher_is_detected_and_gives_ranks():
    settings = resolve_settings(environ={}, dask_config={})
    plans = [negotiate(settings, local_env(rank, 4)) for rank in range(4)]
    assert [p.launcher.name for p in plans] == ["run"] * 4
    assert [p.role for p in plans] == [Role.SCHEDULER, Role.CLIENT, Role.WORKER, Role.WORKER]
    assert len({p.identity.launch_id for p in plans}) == 1
    assert "abc123" in str(plans[0].exchange.path)


def test_two_launches_never_share_a_scheduler_file():
    settings = resolve_settings(environ={}, dask_config={})
    first = negotiate(settings, local_env(0, 3, "one"))
    second = negotiate(settings, local_env(0, 3, "two"))
    assert first.exchange.path != second.exchange.path


def test_local_launcher_without_launch_id_is_a_clear_error():
    from hpcfutures import LauncherError

    settings = resolve_settings(environ={}, dask_config={})
    with pytest.raises(LauncherError, match="HPCFUTURES_LAUNCH_ID"):
        negotiate(settings, {"HPCFUTURES_RANK": "0", "HPCFUTURES_SIZE": "3"})


def test_no_launcher_variables_means_the_laptop_default():
    settings = resolve_settings(environ={}, dask_config={})
    plan = negotiate(settings, {})
    assert plan.launcher.name == "local" and plan.role is Role.STANDALONE


def test_the_former_name_embedded_still_means_the_laptop_default():
    settings = resolve_settings({"launcher": "embedded"}, environ={}, dask_config={})
    plan = negotiate(settings, {})
    assert plan.launcher.name == "local" and plan.role is Role.STANDALONE


def test_laptop_default_forced_under_hpcfutures_run_is_refused_with_the_way_out():
    from hpcfutures import ConfigurationError

    run_env = {"HPCFUTURES_RANK": "1", "HPCFUTURES_SIZE": "4", "HPCFUTURES_LAUNCH_ID": "x"}
    settings = resolve_settings({"launcher": "local"}, environ={}, dask_config={})
    with pytest.raises(ConfigurationError, match=r"one of 4 copies.*launcher='run'"):
        negotiate(settings, run_env)
    detected = negotiate(resolve_settings(environ={}, dask_config={}), run_env)
    assert detected.launcher.name == "run" and detected.role is Role.CLIENT


def test_an_executor_inside_a_task_is_refused_before_any_launcher_is_asked():
    from hpcfutures import NestedExecutorError
    from hpcfutures._launch.plan import TASK_VAR

    inside = {TASK_VAR: "rank 3 (worker) of launch mpi-7 on node17",
              "PMI_RANK": "3", "PMI_SIZE": "4"}  # MPI would be initialised next
    settings = resolve_settings(environ={}, dask_config={})
    with pytest.raises(NestedExecutorError, match=r"inside a task, which runs on rank 3 \(worker"):
        negotiate(settings, inside)
    with pytest.raises(NestedExecutorError, match=TASK_VAR):
        negotiate(settings, {TASK_VAR: "local worker local-0 (pid 9) on laptop"})


def test_forced_unknown_launcher_is_named_in_the_error():
    from hpcfutures import ConfigurationError

    settings = resolve_settings({"launcher": "pbs-nope"}, environ={}, dask_config={})
    with pytest.raises(ConfigurationError, match="pbs-nope"):
        negotiate(settings, {})


def test_one_host_binds_to_loopback_and_explicit_options_win():
    settings = resolve_settings(environ={}, dask_config={})
    one_host = Identity(launcher="x", rank=0, size=3, launch_id="l", single_host=True)
    many = Identity(launcher="x", rank=0, size=3, launch_id="l", single_host=False)
    assert bind_address(settings, one_host) == ("127.0.0.1", None)
    assert bind_address(settings, many) == (None, None)
    explicit = resolve_settings({"interface": "ib0"}, environ={}, dask_config={})
    assert bind_address(explicit, one_host) == (None, "ib0")


@pytest.mark.parametrize("size, sic, asked, warned", [
    (4, False, 2, False), (4, False, 8, True), (4, True, 3, False), (4, True, 2, True),
    (1, False, 8, False),  # the laptop default: max_workers is its number of workers
])
def test_max_workers_that_the_ranks_do_not_give_is_a_warning(size, sic, asked, warned, caplog):
    from types import SimpleNamespace

    from hpcfutures._launch.client_side import ClientSide

    settings = resolve_settings({"max_workers": asked, "scheduler_in_client": sic},
                                environ={}, dask_config={})
    role = Role.STANDALONE if size == 1 else Role.CLIENT
    plan = SimpleNamespace(role=role, identity=SimpleNamespace(size=size))
    ClientSide(settings, plan, None)._warn_of_ignored_max_workers()  # type: ignore[arg-type]
    assert ("is ignored under a launcher" in caplog.text) is warned, caplog.text
