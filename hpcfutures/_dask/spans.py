"""Dask's record of finished default spans, kept to a bounded length.

Dask's scheduler files every task under a *span* (``distributed.spans``).
Tasks that name none go to the "default" span, and a graph that arrives when
every task of the last default span has ended opens a new one; each span keeps
its task groups, and the scheduler keeps every span, for its whole life.  An
executor sends many small graphs as work goes out (a chunk of a map, a few
submits), with pauses in between whenever the caller lags behind: an endless
``map`` on the laptop default opened ~35 spans a second, and the scheduler's
process (the client's own, on a laptop) grew by ~6 MB a minute, for ever.

Here the default spans that have ended are dropped once there are
:data:`KEEP` more of them than Dask's dashboard could wish for; spans a user
opened (``dask.span``) are never touched.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KEEP", "prune_default_spans"]

#: Ended default spans kept (the most recent ones): pruning starts at twice as many,
#: so that each graph costs O(1) on average.
KEEP = 100

_DEFAULT = ("default",)


def prune_default_spans(scheduler: Any, keep: int = KEEP) -> int:
    """Drop the default spans beyond the ``keep`` most recent ones that have ended,
    once there are ``2 * keep``; return how many were dropped.

    Reads ``Scheduler.extensions["spans"]`` (a ``SpansSchedulerExtension``) and
    its ``spans``, ``root_spans``, ``spans_search_by_name`` and
    ``spans_search_by_tag`` (pinned by tests/test_dask_seams.py).
    """
    extension = getattr(scheduler, "extensions", {}).get("spans")
    if extension is None:
        return 0
    defaults = extension.spans_search_by_name.get(_DEFAULT)
    if not defaults or len(defaults) < 2 * keep:
        return 0
    ended = {span.id for span in defaults[:-keep] if not span.children and span.done}
    if not ended:
        return 0
    for span_id in ended:
        extension.spans.pop(span_id, None)
    extension.spans_search_by_name[_DEFAULT] = [s for s in defaults if s.id not in ended]
    extension.root_spans = [s for s in extension.root_spans if s.id not in ended]
    tagged = extension.spans_search_by_tag.get(_DEFAULT[0])
    if tagged is not None:
        extension.spans_search_by_tag[_DEFAULT[0]] = [s for s in tagged if s.id not in ended]
    return len(ended)
