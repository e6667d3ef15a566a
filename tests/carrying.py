"""Whatever ProcessPoolExecutor round-trips, an hpcfutures executor round-trips the same.

Shared by ``test_carrying.py`` (the laptop default) and ``jobs/carrying_job.py`` (the
same property under a launcher).  Values are drawn by hypothesis: plain data, Dask's
own graph objects (``Task``, ``TaskRef``, ``DataNode``, ``Alias``: what a Dask
collection computed with an executor as its scheduler passes), tuples that begin with
a callable, strings that look like Dask keys, objects with ``__dask_graph__``, inside
lists, tuples, sets and dicts, and keyword arguments of any name.  Both executors run
:func:`described`, which returns the ``repr`` of what the call received.
"""

from __future__ import annotations

import keyword
import operator

from dask._task_spec import Alias, DataNode, Task, TaskRef
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


class HasGraph:
    """An object that says it is a Dask collection (``__dask_graph__``)."""

    def __init__(self, tag: int) -> None:
        self.tag = tag

    def __dask_graph__(self):
        return {("graph", self.tag): (operator.add, 1, 2)}

    def __repr__(self) -> str:
        return f"HasGraph({self.tag})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HasGraph) and other.tag == self.tag

    def __hash__(self) -> int:
        return hash(self.tag)


def described(*args, **kwargs) -> str:
    """What the call received, as text both executors can compare (a set's order is
    not part of its value: pickling may change it, so sets are shown sorted)."""
    return repr((_canonical(args), sorted(_canonical(kwargs).items())))


def _canonical(value):
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted(map(repr, value)))
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_canonical(v) for v in value)
    return value


keys = st.one_of(st.text(min_size=1, max_size=8), st.sampled_from(
    ["hpcf-1234abcd-f-0", "('x', 0)", "finalize-abc", "task"]))
leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10),
    st.binary(max_size=10), keys,
    st.builds(lambda k, a, b: Task(k, operator.add, a, b), keys, st.integers(), st.integers()),
    st.builds(lambda k, r: Task(k, operator.neg, TaskRef(r)), keys, keys),
    st.builds(TaskRef, keys),
    st.builds(lambda k, v: DataNode(k, v), keys, st.integers()),
    st.builds(Alias, keys, keys),
    st.builds(lambda a, b: (operator.add, a, b), st.integers(), st.integers()),
    st.builds(HasGraph, st.integers()),
)
values = st.recursive(leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner, inner),
    st.dictionaries(st.text(max_size=5), inner, max_size=3),
    st.frozensets(st.integers(), max_size=3)), max_leaves=8)
names = st.one_of(
    st.sampled_from(["self", "fn", "key", "args", "kwargs", "func", "pure", "workers",
                     "resources", "priority", "timeout", "chunksize", "dask_key_name"]),
    st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
        lambda n: not keyword.iskeyword(n)))
calls = st.tuples(st.lists(values, max_size=3), st.dictionaries(names, values, max_size=3))


def check_round_trips(ex, reference, examples: int = 60) -> None:
    """``ex`` gives every drawn call what ``reference`` (a ProcessPoolExecutor) gives it,
    one call at a time and many at once (bundled), and stays usable throughout."""

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(calls)
    def alone(call):
        args, kwargs = call
        expected = reference.submit(described, *args, **kwargs).result(timeout=60)
        assert ex.submit(described, *args, **kwargs).result(timeout=60) == expected

    @settings(max_examples=max(examples // 6, 5), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(calls, min_size=2, max_size=12))
    def together(many):
        ours = [ex.submit(described, *args, **kwargs) for args, kwargs in many]
        theirs = [reference.submit(described, *args, **kwargs) for args, kwargs in many]
        assert [f.result(timeout=60) for f in ours] == [f.result(timeout=60) for f in theirs]
        firsts = [args[0] if args else None for args, _ in many]
        assert list(ex.map(described, firsts, timeout=60)) == list(
            reference.map(described, firsts, timeout=60))

    alone()
    together()
    assert ex.submit(operator.add, 2, 3).result(timeout=60) == 5
