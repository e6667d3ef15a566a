"""How a launch under ``hpcfutures run`` ended: its status, and the line that says who failed.

The status is the client's; else the first other copy that failed, except a
worker that a call killed (its watcher leaves a note saying so, and the client
was told of it with a WorkerCrashError).  When the launch failed, one line names
the copy that failed first on its own and where its log is.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Collection, Mapping

from .._support.logs import where_to_read
from ..launchers.run import launch_id_of

__all__ = ["NO_CLIENT", "death_note", "death_notes_folder", "failed_first", "failure_pointer",
           "how_it_ended", "killed_by_a_call", "launch_status", "role_of"]


#: ``role_of``'s ``client`` for a serving launch: no rank is the client.
NO_CLIENT = -1


def role_of(rank: int, size: int, client: int) -> str:
    """The role rank ``rank`` plays (as in _roles.assign_role), for messages and log names."""
    if size == 1:
        return "standalone"
    if rank == client:
        return "client"
    return "scheduler" if rank == 0 else "worker"


def how_it_ended(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def failure_pointer(first: int, code: int, size: int, client: int, token: str,
                     environ: Mapping[str, str], role: str | None = None,
                     launch_failed: bool = True, serving: bool = False) -> str:
    """One line naming the copy that failed first and where to read what it said.

    In a launch that ended well, the copy is a worker that a call killed (the
    client was told, caught it, and ended with 0; a serving launch served on):
    still worth a pointer."""
    role = role or role_of(first, size, client)
    where = where_to_read(first, role, launch_id_of(token), environ)
    if not launch_failed:
        after = ("the launch served on" if serving
                 else "the client carried on and ended well")
        return (f"hpcfutures run: rank {first} ({role}) was killed by a call, "
                f"{how_it_ended(code)}; {after}; {where}")
    return f"hpcfutures run: rank {first} ({role}) failed first, {how_it_ended(code)}; {where}"


def death_notes_folder(token: str) -> str | None:
    """A private folder where a worker's watcher notes what the worker died of."""
    from .._remote.watcher import death_notes

    folder = death_notes(token)  # as the copies see it (HPCFUTURES_LAUNCH_ID)
    try:
        os.makedirs(os.path.dirname(folder), mode=0o700, exist_ok=True)
        os.mkdir(folder, mode=0o700)
    except OSError:
        return None
    return folder


def death_note(notes: str | None, rank: int) -> str:
    """``; it exited with status 3 running job.crash ...``, if the rank's watcher said so."""
    text = _read_note(notes, rank).get("text", "")
    return f"; {text}" if text else ""


def killed_by_a_call(notes: str | None, ranks: int) -> set[int]:
    """The copies whose watcher said that a call killed them (the client was told)."""
    return {rank for rank in range(ranks) if _read_note(notes, rank).get("by_a_call")}


def _read_note(notes: str | None, rank: int) -> dict:
    if notes is None:
        return {}
    try:
        with open(os.path.join(notes, str(rank))) as note:
            found = json.load(note)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def failed_first(order: list[int], codes: list[int], client: int,
                  ended_by_us: set[int]) -> int | None:
    """The copy that failed first on its own, from ``order`` (the order they ended in).

    A copy that ends with the client's failing status followed a verdict that the
    scheduler passed on (a launch whose workers could never start): it did not
    fail on its own, and the client is named instead, unless another copy had
    failed differently before.
    """
    verdict = codes[client] if codes[client] != 0 else None
    for rank in order:
        if codes[rank] == 0 or rank in ended_by_us:
            continue
        if rank != client and codes[rank] == verdict:
            continue  # followed the client's verdict
        return rank
    return None


def launch_status(codes: list[int], client: int, excused: Collection[int] = ()) -> int:
    """The client's status, else the first other failure (signals as 128+N).

    A worker copy that a call killed (``excused``) is no failure of the launch: the
    client got a WorkerCrashError for that call and decided what to make of it (a
    script that catches it and ends well ends the launch with 0).
    """
    def normal(code: int) -> int:
        return 128 - code if code < 0 else code

    if codes[client] != 0:
        return normal(codes[client])
    for rank, code in enumerate(codes):
        if code != 0 and rank not in excused:
            return normal(code)
    return 0
