"""The batching engine, driven by made-up durations: no cluster, no sleeps, no processes.

The engine (``_facade/core/batching.py``) decides how many calls each Dask task
carries and how many tasks are out at once; these tests feed it measured
seconds per call and check the groups it cuts for ``map`` streams and for the
``submit`` stream, the in-flight budget, and the share between streams.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import math
import pickle
import tracemalloc
from unittest import mock

import pytest
from helpers import engine_stub

from hpcfutures._facade.core import batching, pacing
from hpcfutures._facade.core.arguments import (
    futures_in,
    plain_rows,
    refuse_foreign_futures,
    swap_futures,
)
from hpcfutures._facade.core.batching import Batcher, Stream
from hpcfutures._facade.core.bundles import SubmitStream
from hpcfutures._facade.core.futures import TaskFuture
from hpcfutures._facade.core.mapping import Rest
from hpcfutures._facade.core.records import Call
from hpcfutures._facade.maps import _map_calls
from hpcfutures._remote.calls import Rows, run_bundle, run_chunk_task


def square(x):
    return x * x


def cube(x):
    return x ** 3


def slow(x):
    return x


class Threads:
    """The cluster's worker threads, as the bridge would report them."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self) -> int:
        return self.n


def engine(threads: int = 2, **known: float) -> Batcher:
    """An engine with ``threads`` worker threads and some durations already measured."""
    batcher = Batcher(Threads(threads))
    for name, seconds in known.items():
        batcher.durations.record(globals()[name], seconds)
    return batcher


def sizes(groups) -> list[int]:
    return [len(calls) for _, calls in groups]


# ------------------------------------------------------------------ budget
def test_budget_is_two_groups_per_worker_thread_and_follows_the_cluster():
    threads = Threads(3)
    batcher = Batcher(threads)
    stream = Stream(slow, range(100))
    batcher.open(stream)
    assert batcher.budget() == 6
    assert len(batcher.plan()) == 6 and batcher.in_flight == 6
    assert batcher.plan() == []  # full: nothing more until a group comes back
    threads.n = 4  # two more threads joined
    assert len(batcher.plan()) == 2
    batcher.done(stream)
    assert len(batcher.plan()) == 1 and batcher.in_flight == 8


def test_an_unmeasured_function_goes_in_groups_of_the_smallest_size():
    batcher = engine()
    single, chunked = Stream(slow, range(10)), Stream(square, range(1000), min_size=64)
    batcher.open(single)
    assert sizes(batcher.plan()) == [1, 1, 1, 1]
    batcher.close(single)
    for _ in range(4):
        batcher.done(single)
    batcher.open(chunked)
    assert sizes(batcher.plan()) == [64, 64, 64, 64]


# ------------------------------------------------------------- group sizes
def test_groups_grow_from_the_first_measurement_towards_the_target():
    batcher = engine(threads=1)
    stream = Stream(square, range(100_000))
    batcher.open(stream)
    first = batcher.plan()
    assert sizes(first) == [1, 1]  # unknown: measured one by one
    batcher.done(stream, [(square, 0.001)])  # 1 ms per call: target = 50 calls
    assert sizes(batcher.plan()) == [16]  # at most GROWTH times the previous group
    batcher.done(stream, [(square, 0.001)])
    assert sizes(batcher.plan()) == [50]  # then the target's worth of work
    assert batching.TARGET_SECONDS / 0.001 == pytest.approx(50)


@pytest.mark.parametrize("seconds, expected", [
    (1.0, 1),        # long calls go alone
    (0.01, 5),       # 50 ms of work
    (0.0005, 100),
    (1e-6, 16 * 16),  # tiny calls: growth is what limits
])
def test_group_size_for_a_measured_duration(seconds, expected):
    batcher = engine(threads=1, square=seconds)
    stream = Stream(square, range(100_000))
    batcher.open(stream)
    stream.next_size = 16  # a previous group of 16
    assert sizes(batcher.plan())[0] == expected


def test_chunksize_is_the_smallest_group_even_for_long_calls():
    batcher = engine(threads=1, square=1.0)
    stream = Stream(square, range(1000), min_size=8)
    batcher.open(stream)
    assert sizes(batcher.plan()) == [8, 8]


def test_fair_share_spreads_the_last_calls_over_every_worker():
    batcher = engine(threads=4, square=0.002)  # budget 8; target: 25 calls
    stream = Stream(square, range(40))
    batcher.open(stream)
    stream.next_size = 1000
    groups = sizes(batcher.plan())
    assert groups == [5, 4, 3, 3, 3, 2, 2, 2]  # what is left / budget, at each cut
    assert len(stream.pending) == 40 - sum(groups)


def test_tiny_calls_are_not_split_below_a_round_trip():
    batcher = engine(threads=4, square=1e-5)  # MIN_SPLIT_SECONDS: 500 calls
    stream = Stream(square, range(300))
    batcher.open(stream)
    stream.next_size = 1000
    assert sizes(batcher.plan()) == [300]


def test_durations_are_learned_from_what_groups_report():
    batcher = engine(threads=1)
    stream = Stream(square, range(10_000))
    batcher.open(stream)
    batcher.plan()
    batcher.done(stream, [(square, 0.010)])
    batcher.done(stream, [(square, 0.002)])
    assert batcher.durations.get(square) == pytest.approx(0.006)  # smoothed
    assert batcher.durations.get(cube) is None


# ------------------------------------------------ groups follow the cluster
def test_a_large_launch_sends_a_maps_first_round_in_fair_shares_then_the_rest_at_its_pace():
    """1,000 threads asking for a task every 50 ms would want 20,000 tasks a second.
    The first round (two places a thread) carries a fair share of the map each, as
    ``chunksize`` would; what comes after it goes in groups of one second of work
    (1,000 threads / TASKS_PER_SECOND), to the very end."""
    batcher = engine(threads=1000, square=0.05)
    assert batcher.pace() == pytest.approx(1000 / batching.TASKS_PER_SECOND)
    calls_per_group = round(batcher.pace() / 0.05)
    stream = Stream(square, range(100_000))
    batcher.open(stream)
    stream.next_size = 1000
    first = batcher.plan()
    assert len(first) == batcher.budget() and set(sizes(first)) == {50}
    assert not stream.pending  # the whole map, in 2,000 tasks
    batcher.extend(stream, list(range(10_000)))  # more calls, as buffersize reads them
    for _ in range(10):
        batcher.done(stream)
    assert set(sizes(batcher.plan())) == {calls_per_group}
    tail = Stream(square, range(1000))  # fewer calls than threads: still at the pace
    other = engine(threads=1000, square=0.05)
    other.open(tail)
    tail.next_size = 1000
    assert sizes(other.plan()) == [calls_per_group] * (1000 // calls_per_group)


def test_a_first_rounds_share_stops_at_the_longest_pace_the_launch_may_learn():
    """A map of 10^6 calls of 0.5 s on 1,000 threads is not cut into 2,000 groups of
    four minutes: groups carry at most CEILING times the nominal pace."""
    batcher = engine(threads=1000, square=0.5)
    stream = Stream(square, range(1_000_000))
    batcher.open(stream)
    stream.next_size = 1000
    assert set(sizes(batcher.plan())) == {int(pacing.CEILING * batcher.pace() / 0.5)}


def test_the_pace_is_a_floor_calls_longer_than_half_of_it_go_two_by_two():
    batcher = engine(threads=1000, square=0.6)  # measured a little over 0.5 s
    stream = Stream(square, range(2000))  # a fair share of one call: the pace decides
    batcher.open(stream)
    stream.next_size = 1
    assert set(sizes(batcher.plan())) == {2}


def test_a_small_launch_keeps_groups_of_fifty_milliseconds():
    batcher = engine(threads=8, square=0.01)
    assert batcher.pace() < batching.TARGET_SECONDS
    stream = Stream(square, range(100_000))
    batcher.open(stream)
    stream.next_size = 1000
    assert set(sizes(batcher.plan())) == {5}


class Clock:
    """Seconds as the test says they pass."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def come_back(batcher: Batcher, clock: Clock, groups: int, seconds: float, busy: float,
              idle: float, *, first_round: bool = False, waiting: int = 10**6) -> Stream:
    """``groups`` groups of a map with ``waiting`` calls still waiting come back evenly
    over ``seconds``, each after ``busy`` s of work, their threads idle ``idle`` s
    before it; past the map's first round unless ``first_round``."""
    stream = Stream(square, range(waiting))
    batcher.open(stream)
    if not first_round:
        stream.returned = batcher.budget()
    for _ in range(groups):
        stream.in_flight += 1
        batcher._in_flight += 1
        clock.now += seconds / groups
        batcher.done(stream, [], busy, idle)
    return stream


def test_a_large_launch_whose_threads_wait_for_groups_sizes_them_for_what_it_sustains():
    """1,000 hosted workers on two cores took about 350 tasks a second, not the
    1,000 the pace assumed: their threads waited for groups as long as they ran
    them.  A thread's cycle (work, then wait) is then what the launch hands out at,
    and groups carry a little more than that."""
    clock = Clock()
    batcher = Batcher(Threads(1000), clock=clock)
    assert batcher.pace() == pytest.approx(1.0)
    come_back(batcher, clock, 300, 1.2, busy=1.0, idle=1.5)  # threads busy 40 % of the time
    assert batcher.pace() == pytest.approx(pacing.HEADROOM * 2.5)
    stream = Stream(square, range(3500))  # a fair share of one call: the pace decides
    batcher.durations.record(square, 0.5)
    batcher.open(stream)
    stream.next_size = 1000
    assert set(sizes(batcher.plan())) == {math.ceil(batcher.pace() / 0.5)}
    # Threads busy again, all the time: the pace shortens, window by window, to the nominal one.
    windows = 0
    while batcher.pace() > 1.0:
        come_back(batcher, clock, 300, 1.2, busy=4.0, idle=0.01)
        windows += 1
        assert windows < 10
    assert batcher.pace() == pytest.approx(1.0)


def test_threads_that_compute_nearly_all_the_time_leave_the_pace_alone():
    clock = Clock()
    batcher = Batcher(Threads(1000), clock=clock)
    come_back(batcher, clock, 500, 2.0, busy=1.0, idle=0.1)  # 91 % busy
    assert batcher.pacing.learnt is None and batcher.pace() == pytest.approx(1.0)


def test_a_small_launch_never_learns_a_pace_from_its_round_trips():
    """Eight threads' idle time between groups is their round trip, not a queue."""
    clock = Clock()
    batcher = Batcher(Threads(8), clock=clock)
    come_back(batcher, clock, 500, 2.0, busy=0.01, idle=0.05)
    assert batcher.pacing.learnt is None
    assert batcher.pace() == pytest.approx(8 / batching.TASKS_PER_SECOND)


def test_a_maps_first_round_and_its_end_teach_nothing():
    """The first round goes out at once and waits for the scheduler to hand the whole
    burst out; at a map's end idle threads take over groups queued elsewhere."""
    clock = Clock()
    batcher = Batcher(Threads(1000), clock=clock)
    come_back(batcher, clock, 500, 2.0, busy=1.0, idle=3.0, first_round=True)
    come_back(batcher, clock, 500, 2.0, busy=1.0, idle=3.0, waiting=0)
    assert batcher.pacing.learnt is None


def test_a_wrong_reading_costs_at_most_the_ceiling():
    clock = Clock()
    batcher = Batcher(Threads(1000), clock=clock)
    come_back(batcher, clock, 300, 6.0, busy=0.1, idle=50.0)
    assert batcher.pace() == pytest.approx(pacing.CEILING * 1.0)


def test_a_thread_idle_before_its_group_was_sent_had_nothing_to_do():
    # Idle 30 s (the previous map ended then), the group sent 0.2 s before it began.
    assert pacing.waited(30.0, sent_at=100.0, busy=1.0, now=101.2) == pytest.approx(0.2)
    assert pacing.waited(0.01, sent_at=100.0, busy=1.0, now=103.0) == pytest.approx(0.01)
    assert pacing.waited(None, sent_at=100.0, busy=1.0, now=101.0) is None
    assert pacing.waited(0.5, sent_at=None, busy=1.0, now=101.0) is None


def test_workers_say_how_long_their_thread_waited_for_each_group():
    def on_a_fresh_thread() -> tuple:
        first = run_chunk_task(square, ([(2,), (3,)],), {})
        second = run_chunk_task(square, ([(4,)],), {})
        bundle = run_bundle([(square, (5,), {})])
        return first, pickle.loads(pickle.dumps(second)), pickle.loads(pickle.dumps(bundle))

    with cf.ThreadPoolExecutor(1) as pool:
        first, second, bundle = pool.submit(on_a_fresh_thread).result()
    assert first.idle is None  # the thread's first group
    assert first.values == [4, 9] and second.values == [16]
    assert second.idle is not None and 0 <= second.idle < 1
    assert bundle.idle is not None and 0 <= bundle.idle < 1 and bundle.results == [(True, 25)]


def test_an_unmeasured_function_on_a_large_launch_is_probed_not_flooded():
    """The first round of a 20,000-call map on 1,000 threads: a hundred one-call
    probes, then equal shares of the rest, one task per place, every thread busy."""
    batcher = engine(threads=1000)
    stream = Stream(slow, range(20_000))
    batcher.open(stream)
    first = sizes(batcher.plan())
    assert len(first) == batcher.budget() == 2000
    assert first[:batching.PROBES] == [1] * batching.PROBES
    # 19,900 calls over 1,900 places: ten each, the same for the last place as the
    # first (a share of what is left at each cut would send only ~60 % of the map).
    assert set(first[batching.PROBES:]) == {19_900 // 1900}
    assert len(stream.pending) == 20_000 - sum(first) < 1000
    # The probes come back: the function is known, the rest goes at the pace.
    batcher.durations.record(slow, 0.5)
    for _ in range(batching.PROBES):
        batcher.done(stream)
    assert set(sizes(batcher.plan())) == {round(batcher.pace() / 0.5)}


def test_a_map_started_while_another_holds_every_place_gets_shares_not_the_whole_map():
    batcher = engine(threads=1000)
    busy = Stream(slow, range(100_000))
    batcher.open(busy)
    assert len(batcher.plan()) == batcher.budget()
    late = Stream(cube, range(20_000))
    batcher.open(late)
    for _ in range(batching.PROBES + 10):  # places free up one by one
        batcher.done(busy)
    groups = [(stream, calls) for stream, calls in batcher.plan() if stream is late]
    assert sizes(groups) == [1] * batching.PROBES + [(20_000 - batching.PROBES) // 1900] * 10


# -------------------------------------------------------- the submit stream
class Held:
    """A stand-in for a held call's future: only ``done()`` is asked."""

    def __init__(self, cancelled: bool = False) -> None:
        self.cancelled = cancelled
        self._call = Call()

    def done(self) -> bool:
        return self.cancelled


def submit_stream(batcher: Batcher, fns) -> SubmitStream:
    stream = SubmitStream(engine_stub(batcher=batcher))
    batcher.open(stream)
    for fn in fns:
        stream.hold(Held(), fn, (1,), {})
    return stream


def names(groups) -> list[list[str]]:
    return [[call[1].__name__ for call in calls] for _, calls in groups]


def test_submit_packs_measured_calls_of_several_functions_up_to_the_target():
    batcher = engine(threads=1, square=0.01, cube=0.02)
    stream = submit_stream(batcher, [square, cube] * 6)
    stream.next_size = 100
    assert names(batcher.plan()) == [["square", "cube", "square"], ["cube", "square", "cube"]]
    assert len(stream.pending) == 6


def test_submit_sends_an_unmeasured_function_alone_and_skips_cancelled_calls():
    batcher = engine(threads=1, square=0.001)
    stream = submit_stream(batcher, [square, square, slow, square])
    stream.pending[1][0].cancelled = True
    stream.next_size = 100
    assert names(batcher.plan()) == [["square"], ["slow"]]
    batcher.done(stream, [(slow, 0.001)])
    assert names(batcher.plan()) == [["square"]]


def test_take_out_sends_one_call_at_once_within_the_budget():
    batcher = engine(threads=1, square=0.001)
    stream = submit_stream(batcher, [square, cube, square])
    wanted = stream.pending[1][0]
    call = batcher.take_out(stream, lambda: stream._claim(wanted))
    assert call[1] is cube and batcher.in_flight == 1
    assert batcher.take_out(stream, lambda: stream._claim(wanted)) is None
    assert sizes(batcher.plan()) == [2]  # one place left: one group, of both squares


def test_a_call_sent_alone_is_claimed_without_a_scan_and_never_sent_or_failed_again():
    """10⁶ held calls: a dependent submit claims its argument's call through the
    future itself; the entry left in the queue is skipped, and a drain spares it."""
    batcher = engine(threads=1, square=0.001)
    stream = submit_stream(batcher, [square] * 5)
    wanted = stream.pending[0][0]
    others = [call[0] for call in list(stream.pending)[1:]]

    class Unscannable(collections.deque):
        def __iter__(self):
            raise AssertionError("scanned the held calls")

    stream.pending = Unscannable(stream.pending)
    assert batcher.take_out(stream, lambda: stream._claim(wanted))[0] is wanted
    assert len(stream.pending) == 5  # left in place, skipped when at the front
    assert [call[0] for _, calls in batcher.plan() for call in calls] == others
    # A drain fails the calls still held; the one sent alone is running: spared
    # (settling a stand-in would raise here).
    stream.drained([(wanted, square, (1,), {})], error=RuntimeError("drained"))
    assert wanted._call.held is None


# ----------------------------------------------------- sharing the budget
def test_a_second_map_gets_its_fair_share_as_places_free_up():
    batcher = engine(threads=2, slow=1.0)  # budget 4, calls go one by one
    first, second = Stream(slow, range(100)), Stream(slow, range(100))
    batcher.open(first)
    assert len(batcher.plan()) == 4
    batcher.open(second)
    assert batcher.plan() == []  # no place free yet
    served = collections.Counter()
    for _ in range(8):  # the first map's groups come back one at a time
        batcher.done(first)
        for stream, _calls in batcher.plan():
            served["first" if stream is first else "second"] += 1
    assert (first.in_flight, second.in_flight) == (2, 2)
    assert served == {"second": 2, "first": 6}


def test_maps_and_submits_take_turns_when_they_have_as_many_groups_out():
    batcher = engine(threads=1, slow=1.0, square=1.0)  # budget 2
    calls = submit_stream(batcher, [square] * 10)
    a_map = Stream(slow, range(10))
    batcher.open(a_map)
    out = collections.deque(batcher.plan())
    order = [stream for stream, _ in out]
    for _ in range(4):  # the oldest group comes back, a new one goes
        stream, _calls = out.popleft()
        batcher.done(stream)
        new = batcher.plan()
        order += [stream for stream, _ in new]
        out.extend(new)
    assert order == [calls, a_map] * 3
    assert len(calls.pending) == len(a_map.pending) == 7


def test_a_closed_stream_is_never_planned_but_its_groups_still_count():
    batcher = engine(threads=1)
    stream = Stream(slow, range(10))
    batcher.open(stream)
    batcher.plan()
    batcher.close(stream)
    assert batcher.plan() == [] and batcher.in_flight == 2
    batcher.done(stream)
    batcher.done(stream)
    assert batcher.in_flight == 0


# ----------------------------------------------------- the argument walker
def test_walker_swaps_futures_at_any_depth_and_keeps_plain_containers():
    future = TaskFuture()
    plain = ([1, (2, {"a": [3]})], {"k": {4, 5}})
    assert swap_futures(plain, lambda f: "X") is plain  # nothing copied
    Point = collections.namedtuple("Point", "x y")
    args = ([1, (future, {"a": [future]})], Point(future, 2), {future}, {"k": future})
    swapped = swap_futures(args, lambda f: "X")
    assert swapped == ([1, ("X", {"a": ["X"]})], Point("X", 2), {"X"}, {"k": "X"})
    assert type(swapped[1]) is Point and args[0][1][0] is future  # the original is intact


def test_walker_survives_a_container_that_holds_itself():
    future = TaskFuture()
    loop = [future]
    loop.append(loop)
    assert futures_in((loop,)) == [future]


@pytest.mark.parametrize("where", [
    lambda f: ((f,), {}),
    lambda f: (([1, f],), {}),
    lambda f: (((0, (f,)),), {}),
    lambda f: ((), {"x": {"nested": [f]}}),
    lambda f: (({f},), {}),
])
def test_a_foreign_future_is_refused_wherever_it_hides(where):
    foreign = cf.Future()
    args, kwargs = where(foreign)
    with pytest.raises(TypeError, match="another executor"):
        refuse_foreign_futures(args, kwargs)
    args, kwargs = where(TaskFuture())
    refuse_foreign_futures(args, kwargs)  # this executor's own: fine


# ------------------------------------------- a map's items on their way to Dask
def test_plain_rows_sees_any_future_or_container_among_a_maps_items():
    assert plain_rows([(1, "a", None, 2.5), (b"x", True, 3j, 4)]) and plain_rows([])
    assert not plain_rows([(1,), (TaskFuture(),)])
    assert not plain_rows([(1, [2])]) and not plain_rows([({"k": 1},)])
    # isinstance() believes __class__: a stand-in for a future counts as one
    assert not plain_rows([(mock.Mock(spec=cf.Future),)])


@pytest.mark.parametrize("items", [
    [(1,), (2,), (3,)],                  # one iterable: travels as bare values
    [(1, 10), (2, 20)],                  # several: as tuples
    [((1,),), ((2, 3),), ([4],)],        # one iterable whose items are tuples themselves
])
def test_a_boxed_chunk_runs_as_the_plain_list_would(items):
    def call(*args):
        return args

    boxed = pickle.loads(pickle.dumps(Rows(list(items))))
    assert boxed.spread is (len(items[0]) > 1)
    assert (run_chunk_task(call, (boxed,), {}).values
            == run_chunk_task(call, (items,), {}).values == [tuple(i) for i in items])


def test_an_error_in_a_boxed_chunk_keeps_its_position():
    outcome = run_chunk_task(lambda x: 1 // x, (pickle.loads(pickle.dumps(Rows(
        [(1,), (0,), (2,)]))),), {})
    assert outcome.values == [1] and isinstance(outcome.error, ZeroDivisionError)



# --------------------------------------------- a map over one sequence: slices
def test_a_map_over_a_range_holds_no_call_of_its_own():
    """Ten million one-element tuples were 0.6 GB of the client's memory before the
    first call went; a range is now cut into ranges, each chunk three numbers."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        calls = _map_calls((range(10_000_000),))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert isinstance(calls, Rest) and len(calls) == 10_000_000 and held < 10_000
    chunk = calls.take(1_000_000)
    assert chunk == range(1_000_000) and len(calls) == 9_000_000
    assert len(pickle.dumps(Rows(chunk, spread=False))) < 200
    assert list(Rows(calls.take(2), spread=False)) == [(1_000_000,), (1_000_001,)]


def test_a_map_over_one_list_copies_its_values_not_tuples():
    values = [1, "a", 2.5]
    calls = _map_calls((values,))
    values.clear()  # the caller's list changes once map returned: the calls do not
    assert isinstance(calls, Rest) and list(calls) == [(1,), ("a",), (2.5,)]
    assert isinstance(_map_calls((iter([1, 2]),)), Rest)
    # a future or a container among the values: argument tuples, walked as before
    future = TaskFuture()
    assert _map_calls(([1, future],)) == [(1,), (future,)]
    assert _map_calls(([[1], [2]],)) == [([1],), ([2],)]
    assert _map_calls(([1, 2], "ab")) == [(1, "a"), (2, "b")]


def test_a_chunk_cut_from_a_sequence_runs_each_value_as_the_only_argument():
    calls = _map_calls((range(5),))
    boxed = pickle.loads(pickle.dumps(Rows(calls.take(5), spread=False)))
    assert run_chunk_task(square, (boxed,), {}).values == [0, 1, 4, 9, 16]
