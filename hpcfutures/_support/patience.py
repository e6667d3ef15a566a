"""Every wait of a launch that must grow with its size, derived in one place.

A launch of 4 ranks and one of 4,000 share one scheduler: one process, one
event loop, one core.  Anything each rank asks of it (a TLS handshake to
probe or join, ~2 ms of the scheduler's CPU; a certificate; a report) queues
behind what every other rank asks at the same moment, so an answer that
takes milliseconds at 4 ranks takes seconds at 4,000.  A wait fixed for the
small case then reads a busy scheduler as a dead one: ranks give up, take a
live scheduler file for a stale one, or leave a launch that has only begun.

So no module keeps its own constant for such a wait.  Each asks
:class:`Patience`, built from the launch's size and its ``timeout``: the
value for a small launch is a fixed base, and on top of it comes the time the
scheduler needs to hear every rank once (:attr:`Patience.herd`), never more
than ``timeout`` allows.
Polls of shared things (the scheduler file on a shared filesystem, the
scheduler's port) back off with jitter, so that ranks started together by a
launcher do not stay in step.
"""

from __future__ import annotations

import dataclasses
import random

__all__ = ["HERD_SECONDS_PER_RANK", "Patience", "in_seconds", "jittered", "shared_file_poll"]

#: Scheduler seconds to hear one rank once: two TLS handshakes (a probe and
#: the join) at ~2 ms of CPU each on a 2-core node, with room for Dask's
#: registration.  ``benchmarks/scale.py`` measures it ("scheduler CPU per join").
HERD_SECONDS_PER_RANK = 0.005


def in_seconds(seconds: float) -> str:
    """A wait as an error message names it: "2 s", to a tenth of a second.

    A lookup is given what is left of the launch's deadline, which is a few
    microseconds (or, on a loaded node, milliseconds) short of the ``timeout``
    the user set: printed in full, a timeout of 2 would read "1.99999 s".
    """
    return f"{round(seconds, 1):g} s"


def jittered(seconds: float, spread: float = 0.25) -> float:
    """``seconds`` give or take ``spread`` of it, at random: ranks fall out of step."""
    return seconds * (1.0 + random.uniform(-spread, spread))


@dataclasses.dataclass(frozen=True)
class Patience:
    """How long each wait of a launch of ``ranks`` ranks lasts (``timeout``: the
    launch's own deadline, which none of these exceeds)."""

    ranks: int = 1
    timeout: float = 60.0

    @property
    def herd(self) -> float:
        """Seconds the scheduler needs to hear every rank of the launch once."""
        return max(self.ranks, 1) * HERD_SECONDS_PER_RANK

    def _grown(self, small: float) -> float:
        return min(small + self.herd, max(self.timeout, small))

    # ------------------------------------------------------------ start-up
    @property
    def probe_timeout(self) -> float:
        """Seconds a probe of a published scheduler address waits for its answer."""
        return self._grown(5.0)

    @property
    def busy_grace(self) -> float:
        """Seconds more for a scheduler whose port accepts connections but that has
        not answered a probe: alive, and busy with the launch's other ranks.

        Once, never more: a scheduler may need longer than the launch's
        ``timeout`` to hear thousands of ranks on a small node, and a rank whose
        ``timeout`` runs out at a live scheduler would leave the launch one worker
        short.  A scheduler that
        is alive but never answers still ends in an error, at twice the deadline.
        """
        return self.timeout

    @property
    def knock_timeout(self) -> float:
        """Seconds a joining worker's knock (does the scheduler still answer?) waits."""
        return self._grown(1.0)

    @property
    def knock_every(self) -> float:
        """Seconds between a joining worker's checks that the launch still runs.

        Each check is a TLS handshake on the scheduler: at one check per rank
        per second, 1,000 pending joins alone would keep it busy."""
        return max(0.25, 2 * self.herd)

    @property
    def report_timeout(self) -> float:
        """Seconds a rank spends telling the scheduler something (a failed start)."""
        return self._grown(5.0)

    # ------------------------------------------------------------ the run
    def certificate_wait(self, deaths: int = 1) -> float:
        """Seconds the client waits for a dead worker's certificate, when ``deaths``
        workers died together: each one's watcher starts a process and connects
        to the scheduler, so a wave queues them (it grows with the wave, not with
        the launch: a lost node's watchers never report, and every call it ran
        waits this long before it runs again)."""
        return min(8.0 + max(deaths, 1) * HERD_SECONDS_PER_RANK, max(self.timeout, 8.0))

    @property
    def ask_timeout(self) -> float:
        """Seconds a question to the scheduler about every worker may take (the
        roster, the summary, the goodbye)."""
        return self._grown(5.0)

    # ------------------------------------------------------------ the end
    @property
    def grace(self) -> float:
        """Seconds the other ranks get to end after the client finished."""
        return 10.0 + 2 * self.herd

    @property
    def farewell(self) -> float:
        """Seconds a worker that lost its scheduler without hearing the verdict looks
        for the launch's end mark before calling the loss a failure: the scheduler
        marks the end only after closing, which takes longer the more workers it
        closes."""
        return self._grown(3.0)

    @classmethod
    def for_launch(cls, ranks: int | None, timeout: float) -> Patience:
        return cls(ranks=max(int(ranks or 1), 1), timeout=float(timeout))


def shared_file_poll(waited: float) -> float:
    """Seconds until the next look at a file that another rank will write, after ``waited`` s.

    Quick at first (a launch's ranks find the scheduler file within a second or
    two of its start), then at most once a second per rank, with jitter: on a
    shared filesystem every look is a metadata operation on one server, and
    10,000 ranks looking ten times a second would saturate it for everyone.
    """
    if waited < 2.0:
        return min(0.005 * 2 ** (waited / 0.25), 0.1)
    if waited < 10.0:
        return jittered(0.5)
    return 1.0 + random.uniform(0.0, 0.5)
