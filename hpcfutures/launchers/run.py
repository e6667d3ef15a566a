"""The ``run`` launcher plug-in: processes started by ``hpcfutures run -n N``.

``hpcfutures run`` sets ``HPCFUTURES_RANK``, ``HPCFUTURES_SIZE`` and
``HPCFUTURES_LAUNCH_ID`` in each copy, the way ``srun`` sets ``SLURM_PROCID``.
All copies run on this host, so everything binds to loopback by default.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._errors import LauncherError
from ._base import Launcher
from ._batchenv import SIZE_VAR, int_var
from ._exchange import AddressExchange
from ._identity import Identity

__all__ = [
    "JOINED_MARK", "LAUNCH_ID_VAR", "RANK_VAR", "ROLE_MARK", "SIZE_VAR", "TAGGED_VAR",
    "TERMINAL_VAR", "RunLauncher", "announce_role", "launch_id_of",
]

#: SIZE_VAR (``HPCFUTURES_SIZE``) is shared with the launchers that cannot tell
#: their processes how many they are: there the user sets it.
#: The launcher named in messages about its variables (see ``_batchenv.int_var``).
SYSTEM = "'hpcfutures run'"
RANK_VAR = "HPCFUTURES_RANK"
LAUNCH_ID_VAR = "HPCFUTURES_LAUNCH_ID"
#: Set by ``hpcfutures run`` when it tags every line of a copy's output with
#: ``[rank N role]``: the copy then tells it its role (:func:`announce_role`).
TAGGED_VAR = "HPCFUTURES_RUN_TAGGED"
#: Set by ``hpcfutures run`` when the output it relays goes to a terminal.
TERMINAL_VAR = "HPCFUTURES_RUN_TERMINAL"
#: How a copy tells ``hpcfutures run`` its role, on a line of its stderr that is
#: not shown (a NUL byte starts no line a program prints).
ROLE_MARK = b"\x00hpcfutures-role "
#: A copy's word to ``hpcfutures run`` that its worker joined the scheduler: one
#: still starting when the client finished is no failure if it must be ended.
JOINED_MARK = b"\x00hpcfutures-joined"


def announce_role(role: str, environ: Mapping[str, str]) -> None:
    """Tell ``hpcfutures run`` this copy's role, for the tags of its lines.

    ``hpcfutures run`` guesses each role from the environment; an option given
    as a keyword (``scheduler_in_client=True``) can change it, which only the
    copy knows once it has negotiated.
    """
    _mark(ROLE_MARK + role.encode(), environ)


def _mark(mark: bytes, environ: Mapping[str, str]) -> None:
    """A line for ``hpcfutures run``'s relay alone (it drops it from the output)."""
    if environ.get(TAGGED_VAR) != "1":
        return
    import sys

    try:
        sys.stderr.flush()
        sys.stderr.buffer.write(mark + b"\n")
        sys.stderr.buffer.flush()
    except (AttributeError, OSError, ValueError):  # stderr replaced or closed
        pass


def launch_id_of(token: str) -> str:
    """The launch id of the copies ``hpcfutures run`` started with ``token``
    (it also names their log directory under ``HPCFUTURES_LOG_DIR``)."""
    return f"run-{token}"


class RunLauncher(Launcher):
    """N copies on this machine, started by ``hpcfutures run``."""

    name = "run"
    reports_every_rank = False  # its status is the client's (see _cli/verdict.py)

    def address_exchange(self, identity: Identity) -> AddressExchange:
        """A scheduler file that ends as a tombstone: a copy that is still starting
        when a short launch ends (say, the client failed at once) then exits 0 at
        once instead of waiting for its deadline.  Launch ids are random, so an
        old tombstone never matches a new launch."""
        from ._schedfile import SchedulerFileExchange

        return SchedulerFileExchange.for_launch(self.settings, identity, tombstone=True)

    def worker_joined(self, identity: Identity) -> None:
        _mark(JOINED_MARK, self.environ)

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> str | None:
        if environ.get(RANK_VAR, "") != "":
            return f"{RANK_VAR} is set (started by 'hpcfutures run')"
        return None

    def identity(self) -> Identity:
        rank = int_var(self.environ, RANK_VAR, SYSTEM, required=True)
        size = int_var(self.environ, SIZE_VAR, SYSTEM, required=True)
        launch_id = self.environ.get(LAUNCH_ID_VAR, "")
        if not launch_id:
            raise LauncherError(
                f"{LAUNCH_ID_VAR} is not set: without it the copies of this launch cannot tell "
                "their scheduler file from another launch's; start them with 'hpcfutures run'"
            )
        return Identity(
            launcher=self.name,
            rank=rank,
            size=size,
            launch_id=launch_id_of(launch_id),
            single_host=True,
            local_rank=rank,
            fields={"job_id": launch_id},
            reasons=(f"rank {rank} of {size} from {RANK_VAR}/{SIZE_VAR}",
                     f"launch id {launch_id} from {LAUNCH_ID_VAR}"),
        )
