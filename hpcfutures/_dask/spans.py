"""Forget Dask's ended default spans, so that an endless map runs in flat memory.

Dask's scheduler files every graph that arrives after its previous work ended
under a new "default" span, and keeps every span for ever (for its dashboard's
history), with the task groups it saw: an endless map sends dozens of graphs
a second, each after a pause, and the scheduler's memory would grow by megabytes
a minute, without end (``benchmarks/memory.py``, endless part, watches it; on
the laptop that is the client's process).

A default span is forgotten once Dask has forgotten every task group it
holds (removed from ``Scheduler.task_groups`` when their last task was
forgotten: no task can join one of them again; a new task of the same group
name gets a new group, and a span with it) and it is not the newest default span (the
one Dask may still give the next graph).  Two places look spans up by id:
joining a task to a live group (impossible here, see above) and the workers'
heartbeat metrics, which may name a span whose last task ended just before;
the heartbeat is guarded to drop the metrics of a forgotten span instead of
raising.  Pruning runs at most once every :data:`PRUNE_EVERY` s, from the
scheduler's graph hook.
"""

from __future__ import annotations

import time
from typing import Any

from distributed import Scheduler

__all__ = ["PRUNE_EVERY", "SpanPruner"]

#: Seconds between two prunings (each walks the default spans still kept).
PRUNE_EVERY = 5.0

_DEFAULT = ("default",)


class SpanPruner:
    """Forgets ended default spans of ``scheduler`` (see the module)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._extension: Any = getattr(scheduler, "extensions", {}).get("spans")
        self._last = time.monotonic()
        self.forgotten = 0
        if self._extension is not None:
            self._guard_heartbeat(self._extension)

    @staticmethod
    def _guard_heartbeat(extension: Any) -> None:
        real = extension.heartbeat

        def heartbeat(ws: Any, data: dict[tuple[Any, ...], float]) -> None:
            known = extension.spans
            kept = {key: value for key, value in data.items()
                    if len(key) > 1 and key[1] in known}
            real(ws, kept)

        extension.heartbeat = heartbeat

    def maybe_prune(self) -> None:
        """Prune if the last pruning is :data:`PRUNE_EVERY` s old."""
        now = time.monotonic()
        if now - self._last >= PRUNE_EVERY:
            self._last = now
            self.prune()

    def prune(self) -> int:
        """Forget every ended default span but the newest; how many were forgotten."""
        extension = self._extension
        if extension is None:
            return 0
        defaults = extension.spans_search_by_name.get(_DEFAULT)
        if not defaults or len(defaults) < 2:
            return 0
        live_groups = self._scheduler.task_groups
        ended = {id(span) for span in defaults[:-1]
                 if not span.children and span.parent is None
                 and not any(live_groups.get(group.name) is group for group in span.groups)}
        if not ended:
            return 0
        for span in defaults:
            if id(span) in ended:
                extension.spans.pop(span.id, None)
        extension.spans_search_by_name[_DEFAULT] = [
            span for span in defaults if id(span) not in ended]
        extension.root_spans = [span for span in extension.root_spans if id(span) not in ended]
        for tag in _DEFAULT:
            spans = extension.spans_search_by_tag.get(tag)
            if spans:
                extension.spans_search_by_tag[tag] = [
                    span for span in spans if id(span) not in ended]
        self.forgotten += len(ended)
        return len(ended)
