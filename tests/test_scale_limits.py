"""Open files at scale (issue 30): every rank raises its soft RLIMIT_NOFILE to the hard one.

Clusters commonly start jobs with a soft limit of 1024 under a far higher hard
one; the scheduler needs about 3 descriptors per worker rank, so it ran out
near 500 workers.  This machine's soft limit is 20,000, so a launch here only
sees the raise when the test lowers the soft limit first (``ulimit -S -n``).
"""

import logging
import sys

import pytest
from helpers import own_lines, run_job

from hpcfutures._support import limits

JOB = """
import resource
import hpcfutures

with hpcfutures.Executor() as ex:
    worker = ex.submit(resource.getrlimit, resource.RLIMIT_NOFILE).result()
    print("WORKER", *worker)
    print("CLIENT", *resource.getrlimit(resource.RLIMIT_NOFILE))
"""


def _hard_limit() -> int:
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def _under_soft_limit(soft: int, *command) -> list[str]:
    """``command`` started under a soft open-files limit of ``soft`` (the hard one kept)."""
    return ["bash", "-c", f'ulimit -S -n {soft} && exec "$@"', "bash", *map(str, command)]


@pytest.mark.timeout(120)
def test_every_rank_of_a_launch_raises_its_soft_limit_to_the_hard_one(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    job = run_job(_under_soft_limit(64, sys.executable, "-m", "hpcfutures", "run", "-n", "3",
                                    sys.executable, script), timeout=100)
    assert job.returncode == 0, job
    hard = _hard_limit()
    assert "WARNING" not in own_lines(job.stderr), job
    assert f"[rank 1 client] WORKER {hard} {hard}" in job.stdout, job
    assert f"[rank 1 client] CLIENT {hard} {hard}" in job.stdout, job


@pytest.mark.timeout(60)
def test_run_gives_its_copies_the_soft_limit_it_was_started_with():
    """``hpcfutures run`` raises its own limit (two pipes per copy: 300 descriptors at
    150 copies), but, like srun, starts each copy with the user's soft limit."""
    code = "import resource; print('SOFT', resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    job = run_job(_under_soft_limit(64, sys.executable, "-m", "hpcfutures", "run", "-n", "2",
                                    sys.executable, "-c", code), timeout=50)
    assert job.returncode == 0, job
    assert sorted(line.split()[-1] for line in job.stdout.splitlines()) == ["64", "64"], job


@pytest.mark.timeout(60)
def test_run_starts_more_copies_than_its_soft_limit_has_descriptors_for():
    """40 copies: 80 pipes and 40 pidfds in ``hpcfutures run``, under a soft limit of 64."""
    code = "import time; print('STARTED', flush=True); time.sleep(3)"  # all alive at once
    job = run_job(_under_soft_limit(64, sys.executable, "-m", "hpcfutures", "run", "-n", "40",
                                    sys.executable, "-c", code), timeout=50)
    assert job.returncode == 0, job
    assert job.stdout.count("STARTED") == 40, job


# ---------------------------------------------------------------- in-process
class _Limits:
    """A fake RLIMIT_NOFILE: ``getrlimit``/``setrlimit`` for ``limits.resource``."""

    def __init__(self, monkeypatch, soft, hard, refuse_above=None):
        self.soft, self.hard, self.refuse_above = soft, hard, refuse_above
        self.asked: list[int] = []
        monkeypatch.setattr(limits.resource, "getrlimit", self.getrlimit)
        monkeypatch.setattr(limits.resource, "setrlimit", self.setrlimit)

    def getrlimit(self, which):
        assert which == limits.resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def setrlimit(self, which, values):
        soft, hard = values
        self.asked.append(soft)
        assert hard == self.hard
        if self.refuse_above is not None and soft > self.refuse_above:
            raise ValueError("current limit exceeds maximum limit")
        self.soft = soft


@pytest.fixture
def warnings_logged():
    """WARNINGs of the ``hpcfutures`` logger (it may not propagate to caplog's root)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logger = logging.getLogger("hpcfutures")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


def test_the_scheduler_says_when_even_the_hard_limit_is_too_low(monkeypatch, warnings_logged):
    fake = _Limits(monkeypatch, soft=256, hard=1024)
    result = limits.raise_open_files_limit(2000, scheduler=True)
    assert (result.was, result.soft, result.hard) == (256, 1024, 1024)
    assert fake.soft == 1024
    (record,) = warnings_logged
    message = record.getMessage()
    for words in ("2000 ranks", "6064 open files", "may open only 1024",
                  "hard limit (`ulimit -Hn` says 1024)", "ulimit -n 6064",
                  "/etc/security/limits.conf", "PropagateResourceLimits"):
        assert words in message, message


def test_a_launch_that_fits_or_a_worker_gets_no_warning(monkeypatch, warnings_logged):
    _Limits(monkeypatch, soft=256, hard=20000)
    assert limits.raise_open_files_limit(2000, scheduler=True).soft == 20000
    _Limits(monkeypatch, soft=1024, hard=1024)
    assert limits.raise_open_files_limit(2000, scheduler=False).soft == 1024
    assert warnings_logged == []


def test_a_soft_limit_that_cannot_be_raised_is_kept_and_named(monkeypatch, warnings_logged):
    fake = _Limits(monkeypatch, soft=256, hard=20000, refuse_above=256)
    result = limits.raise_open_files_limit(500, scheduler=True)
    assert result.soft == 256 and not result.raised and fake.asked == [20000]
    (record,) = warnings_logged
    assert "could not raise its soft limit further (the hard limit is 20000)" in \
        record.getMessage()


def test_macos_unlimited_hard_limit_stops_at_open_max(monkeypatch):
    """macOS reports the hard limit as RLIM_INFINITY and refuses a soft one above
    OPEN_MAX (EINVAL, a ValueError in Python): the raise settles on OPEN_MAX."""
    monkeypatch.setattr(limits.sys, "platform", "darwin")
    fake = _Limits(monkeypatch, soft=256, hard=limits.resource.RLIM_INFINITY,
                   refuse_above=limits.MACOS_OPEN_MAX)
    result = limits.raise_open_files_limit(100, scheduler=True)
    assert result.soft == limits.MACOS_OPEN_MAX and result.hard is None
    assert fake.asked == [limits.UNLIMITED_TRY, limits.MACOS_OPEN_MAX]


def test_an_unlimited_soft_limit_is_left_alone(monkeypatch, warnings_logged):
    infinity = limits.resource.RLIM_INFINITY
    fake = _Limits(monkeypatch, soft=infinity, hard=infinity)
    assert limits.raise_open_files_limit(10_000, scheduler=True).soft == infinity
    assert fake.asked == [] and warnings_logged == []


def test_the_client_keeps_one_connection_per_worker_within_half_its_open_files(monkeypatch):
    """At 1,000 workers Dask's pool of 512 made the client open TLS connections again for
    every batch of results (a quarter of its CPU in handshakes)."""
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda _which: (20_000, 40_000))
    assert limits.client_connections(4) == 512  # Dask's own, for the usual launch
    assert limits.client_connections(2_000) == 2_000 + limits.BASE
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1_024, 1_024))
    assert limits.client_connections(2_000) == 512  # never fewer than Dask's
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (3_000, 3_000))
    assert limits.client_connections(2_000) == 1_500  # half the open files: the rest live
