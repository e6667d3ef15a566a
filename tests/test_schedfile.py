"""The scheduler file: private, atomic, stamped with the launch, never trusted blindly."""

import asyncio
import os
import socket
import time

import pytest
from pace import scaled

from hpcfutures import ConfigurationError, SchedulerFileError, StartupTimeoutError
from hpcfutures._errors import LaunchFinished
from hpcfutures.launchers import SchedulerInfo
from hpcfutures.launchers._schedfile import SchedulerFileExchange, default_scheduler_file


def exchange(tmp_path, launch="launch-1", **kwargs):
    return SchedulerFileExchange(tmp_path / "sched.json", launch, rank=2, **kwargs)


def info(launch="launch-1", **kwargs):
    return SchedulerInfo(address="tcp://127.0.0.1:1", launch_id=launch, **kwargs)


def test_published_file_is_private_and_found(tmp_path):
    ex = exchange(tmp_path)
    published = info()
    ex.publish(published)
    assert (tmp_path / "sched.json").stat().st_mode & 0o777 == 0o600
    assert ex.lookup(timeout=1) == published
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_directory_is_created_private(tmp_path):
    ex = SchedulerFileExchange(tmp_path / "new" / "sched.json", "l", rank=0)
    ex.publish(info("l"))
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700


def test_finish_removes_the_file(tmp_path):
    ex = exchange(tmp_path)
    published = info()
    ex.publish(published)
    ex.finish(published)
    assert not (tmp_path / "sched.json").exists()


def test_finish_leaves_a_newer_schedulers_file_alone(tmp_path):
    ex = exchange(tmp_path)
    old, new = info(), info()
    ex.publish(new)
    ex.finish(old)
    assert ex.lookup(timeout=1) == new


def test_tombstone_tells_late_processes_the_launch_is_over(tmp_path):
    ex = exchange(tmp_path, tombstone=True)
    published = info()
    ex.publish(published)
    ex.finish(published)
    with pytest.raises(LaunchFinished):
        ex.lookup(timeout=1)


def test_missing_file_times_out_naming_file_rank_and_seconds(tmp_path):
    ex = exchange(tmp_path)
    started = time.monotonic()
    with pytest.raises(StartupTimeoutError) as caught:
        ex.lookup(timeout=0.5)
    assert time.monotonic() - started < scaled(2)
    message = str(caught.value)
    assert "sched.json" in message and "rank 2" in message and "0.5 s" in message


def test_a_timeout_is_named_as_the_user_set_it_not_as_what_was_left_of_it(tmp_path):
    # The lookup is handed what is left of the launch's deadline: on a loaded node a few
    # microseconds short of HPCFUTURES_TIMEOUT=2, which CI once saw printed as "1.99999 s".
    with pytest.raises(StartupTimeoutError) as caught:
        exchange(tmp_path).lookup(timeout=0.5 - 7e-6)
    assert "waited 0.5 s for the scheduler file" in str(caught.value)
    assert isinstance(caught.value, TimeoutError)


def test_file_of_another_launch_is_ignored(tmp_path):
    ex = exchange(tmp_path)
    ex.publish(info(launch="an-earlier-launch"))
    with pytest.raises(StartupTimeoutError, match="an-earlier-launch"):
        ex.lookup(timeout=0.3)


def test_stale_answer_is_skipped_until_a_fresh_one_appears(tmp_path):
    ex = exchange(tmp_path)
    stale = info()
    ex.publish(stale)
    with pytest.raises(StartupTimeoutError, match="could not be reached"):
        ex.lookup(timeout=0.3, stale=stale)
    fresh = info()
    ex.publish(fresh)
    assert ex.lookup(timeout=1, stale=stale) == fresh


def test_file_of_a_dead_local_process_is_skipped(tmp_path):
    ex = exchange(tmp_path)
    dead_pid = 2 ** 22 + 12345  # above pid_max's default: never a live process
    ex.publish(info(pid=dead_pid, host=socket.gethostname()))
    with pytest.raises(StartupTimeoutError, match="is gone"):
        ex.lookup(timeout=0.3)


def test_group_readable_file_is_refused_with_the_reason(tmp_path):
    ex = exchange(tmp_path)
    ex.publish(info())
    os.chmod(tmp_path / "sched.json", 0o644)
    with pytest.raises(SchedulerFileError, match="other users could read"):
        ex.lookup(timeout=1)


def test_garbage_file_is_a_clear_error(tmp_path):
    path = tmp_path / "sched.json"
    path.write_text("{not json")
    os.chmod(path, 0o600)
    with pytest.raises(SchedulerFileError, match="not a valid hpcfutures scheduler file"):
        exchange(tmp_path).lookup(timeout=1)


def test_template_fields_and_unknown_field():
    path = default_scheduler_file("/shared/dask-{job_id}-{user}.json",
                                  {"job_id": "42", "user": "ann", "launch_id": "x"})
    assert str(path) == "/shared/dask-42-ann.json"
    with pytest.raises(ConfigurationError, match="unknown field"):
        default_scheduler_file("/x/{nope}.json", {"job_id": "1"})


def test_default_path_is_per_user_and_per_launch():
    path = default_scheduler_file(None, {"launch_id": "local-abc", "user": "ann"})
    assert "local-abc" in path.name
    assert str(path).startswith(os.path.expanduser("~"))


def test_old_tombstones_are_swept_when_a_scheduler_publishes(tmp_path):
    old = SchedulerFileExchange(tmp_path / "scheduler-old.json", "old", rank=0, tombstone=True)
    done = info("old")
    old.publish(done)
    old.finish(done)
    day_ago = time.time() - 2 * 24 * 3600
    os.utime(tmp_path / "scheduler-old.json", (day_ago, day_ago))
    live = SchedulerFileExchange(tmp_path / "scheduler-live.json", "live", rank=0)
    live.publish(info("live"))
    assert not (tmp_path / "scheduler-old.json").exists()
    assert (tmp_path / "scheduler-live.json").exists()


def test_a_look_again_after_a_failed_probe_keeps_the_slow_pace_it_had_reached(
        tmp_path, monkeypatch):
    """Issue 30: a rank that had waited 20 s, found the file and failed to probe
    the (busy) scheduler began again at 200 looks a second; at 1,000 ranks the
    harness saw two reads of one rank 0.42 s apart after its first 10 s."""
    from hpcfutures.launchers import _schedfile

    clock = [1000.0]
    monkeypatch.setattr(_schedfile.time, "monotonic", lambda: clock[0])
    ex = exchange(tmp_path)
    waiting = ex._looking(100.0, None)
    assert next(waiting) < 0.05  # quick at first: the file appears within seconds
    clock[0] += 20.0
    assert next(waiting) >= 1.0  # then at most once a second
    published = info()
    ex.publish(published)
    with pytest.raises(StopIteration):
        next(waiting)  # found; its probe fails, and the rank looks again:
    clock[0] += 0.5  # the probe failed half a second after the read that found it
    again = ex._looking(100.0, published)
    assert next(again) >= 0.5  # the look again waits for its turn: a second after that read
    clock[0] += 1.0
    assert next(again) >= 1.0
    # after a silent probe (busy, not gone) the rank wants the same file again: no
    # stale one, and still at its pace (the harness saw two reads 0.62 s apart at 2,000)
    clock[0] += 0.3
    silent = ex._looking(100.0, None)
    assert next(silent) >= 0.5
    # a new launch's exchange (a new executor) starts quick
    fresh = exchange(tmp_path)
    with pytest.raises(StopIteration):
        next(fresh._looking(100.0, None))


def test_a_probe_tells_a_closed_port_a_silent_program_and_a_scheduler_apart():
    """What a rank's look-up asks of the address in a scheduler file: nobody listening
    (a stale file) is a refusal at once, also by a name with several addresses, where
    Dask's connect would retry until its timeout; a program that takes the connection
    but never completes the launch's TLS handshake is silence, never a scheduler, and so
    is another launch's scheduler; the launch's scheduler answers."""
    from helpers import closed_port

    from hpcfutures import _dask
    from hpcfutures._support.security import new_credentials

    ours, theirs = (_dask.make_security(new_credentials()) for _ in range(2))

    async def scenario():
        for address in (f"tls://127.0.0.1:{closed_port()}", f"tls://localhost:{closed_port()}"):
            started = time.monotonic()
            assert await _dask.knock(address, 10, ours) is _dask.Knock.REFUSED, address
            assert time.monotonic() - started < scaled(1), f"{address}: the refusal was retried"
        taken = []  # the mute program's connections, closed at the end
        mute = await asyncio.start_server(lambda _reader, writer: taken.append(writer),
                                          "127.0.0.1", 0)
        port = mute.sockets[0].getsockname()[1]
        try:
            assert await _dask.knock(f"tls://127.0.0.1:{port}", 1, ours) is _dask.Knock.SILENT
        finally:
            for writer in taken:
                writer.close()
            mute.close()
            await mute.wait_closed()
        service = await _dask.SchedulerService(host="127.0.0.1", interface=None,
                                               security=ours).start()
        try:
            assert await _dask.probe(service.address, 10, ours)
            assert await _dask.knock(service.address, 2, theirs) is _dask.Knock.SILENT
        finally:
            await service.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))
