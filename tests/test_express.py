"""Small results ride with their task's end (``_remote/express.py``): no fetch of their own."""

from __future__ import annotations

import asyncio
import pickle
import threading

import cloudpickle
import distributed
import pytest
from helpers import engine_stub
from pace import scaled

import hpcfutures
from hpcfutures._dask.express import express_topic
from hpcfutures._remote.express import EXPRESS_BYTES, small_pickle

pytestmark = pytest.mark.timeout(120)


def test_a_small_value_is_pickled_whole_and_a_large_one_stops_at_the_cap():
    assert pickle.loads(small_pickle({"a": [1, 2, 3]})) == {"a": [1, 2, 3]}
    assert small_pickle(b"x" * (EXPRESS_BYTES + 1)) is None
    assert small_pickle(list(range(10)), cap=8) is None


def test_a_value_with_out_of_band_data_is_never_sent_ahead():
    """An array's data goes from worker to client directly, never through the scheduler."""
    assert small_pickle(pickle.PickleBuffer(b"tiny")) is None


def test_a_value_that_cannot_be_pickled_raises():
    with pytest.raises(TypeError):
        small_pickle(threading.Lock())


def test_a_small_result_goes_to_the_topic_of_the_client_that_named_its_task():
    assert express_topic("hpcf-0123abcd-f-7") == "hpcfutures-express-0"
    assert express_topic("hpcf-0123abcd-bundle-1") == express_topic("hpcf-0123abcd-x")
    assert express_topic("hpcf-fedcba98-f-7") != express_topic("hpcf-0123abcd-f-7")
    # One of 16 topics, however many clients: Dask keeps each topic's last 1,000 events.
    assert {express_topic(f"hpcf-{digit}0000000-f-1") for digit in "0123456789abcdef"} == {
        f"hpcfutures-express-{digit}" for digit in "0123456789abcdef"}
    for foreign in ("inc-0123abcd", ("hpcf-0123abcd-f", 0), "hpcf-"):
        assert express_topic(foreign) is None  # a task of Dask's own: fetched as Dask does


class _Finishing:
    """A Dask future the test ends by hand."""

    def __init__(self, key: str) -> None:
        self.key, self.status, self.ended = key, "pending", asyncio.Event()

    def end(self) -> None:
        self.status = "finished"
        self.ended.set()

    async def exception(self):
        await self.ended.wait()
        return None


class _Client:
    def __init__(self) -> None:
        self.gathered: list[list[str]] = []

    async def gather(self, futures):
        self.gathered.append([f.key for f in futures])
        return ["fetched"] * len(futures)


def test_a_result_that_arrived_ahead_settles_its_future_and_is_never_fetched():
    from hpcfutures._facade.core.completions import Completions
    from hpcfutures._facade.core.futures import TaskFuture

    async def scenario() -> None:
        client = _Client()
        completions = Completions(client, engine_stub())
        ahead, fetched, garbled = (_Finishing(k) for k in ("ahead", "fetched", "garbled"))
        futures = {d.key: TaskFuture() for d in (ahead, fetched, garbled)}
        for dask_future in (ahead, fetched, garbled):
            completions.follow(dask_future, futures[dask_future.key])
        completions.arrived("ahead", cloudpickle.dumps("early"))
        completions.arrived("garbled", b"not a pickle")  # left to the fetch, which reports
        completions.arrived("stranger", cloudpickle.dumps("ignored"))
        assert futures["ahead"].result(timeout=0) == "early"
        heard = asyncio.ensure_future(completions.ends_heard(5))
        await asyncio.sleep(0)
        assert not heard.done(), "the scheduler has not told the end of 'ahead' yet"
        for dask_future in (ahead, fetched, garbled):
            dask_future.end()
        await asyncio.wait_for(heard, 1)  # the summary asks the scheduler after this
        for _ in range(20):
            await asyncio.sleep(0)
        assert futures["fetched"].result(timeout=1) == "fetched"
        assert futures["garbled"].result(timeout=1) == "fetched"
        assert sorted(key for batch in client.gathered for key in batch) == ["fetched", "garbled"]
        assert completions._awaiting == {}, "a settled key is forgotten"

    asyncio.run(asyncio.wait_for(scenario(), 10))


def echo(value):
    return value


def test_on_the_laptop_small_results_are_never_fetched_and_large_ones_are(monkeypatch):
    """End to end on real worker processes: submit and map results that fit come with
    their task's end (no gather at all); one past the cap is fetched from its worker."""
    gathers: list[int] = []
    real_gather = distributed.Client.gather

    def counted(self, futures, *args, **kwargs):
        gathers.append(len(futures) if isinstance(futures, list) else 1)
        return real_gather(self, futures, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "gather", counted)
    with hpcfutures.Executor(2) as ex:
        assert [ex.submit(echo, i).result() for i in range(20)] == list(range(20))
        assert list(ex.map(echo, range(500))) == list(range(500))
        assert gathers == [], "small results were fetched from their workers"
        large = b"y" * (2 * EXPRESS_BYTES)
        # A map: a lone submit would go straight to a worker, its result in the answer.
        assert list(ex.map(echo, [large, large])) == [large, large]
        assert gathers, "a result past the cap came through the scheduler"


def _run_on_a_worker_thread(early: bool, may_give_back: bool = False,
                            ran: list | None = None) -> tuple[list, list]:
    """A chunk whose second item is slow, run on a thread of its own (a fresh slot) with
    a made-up sender: what travelled ahead, and the early heartbeats (``ran``: gets
    the chunk's outcome)."""
    import time

    from hpcfutures._remote import express
    from hpcfutures._remote.calls import run_chunk

    sent: list = []
    nudges: list = []
    express.set_sender(lambda payload: None,
                       lambda: (lambda: "chunk-key", lambda key, payload: sent.append(
                           pickle.loads(payload)), lambda: nudges.append(1)))
    try:
        def chunk() -> None:
            outcome = run_chunk(time.sleep, [(0.0,), (scaled(4 * express.GIVE_BACK_AFTER),),
                                             (0.0,), (0.0,)],
                                early=early, may_give_back=may_give_back)
            if ran is not None:
                ran.append(outcome)

        thread = threading.Thread(target=chunk)
        thread.start()
        thread.join(scaled(30))
        assert not thread.is_alive(), "the chunk did not end"
    finally:
        express.set_sender(None)
    return sent, nudges


def test_a_running_chunk_sends_its_finished_items_ahead_only_on_a_small_launch():
    """On a small launch the first item's outcome travels while the slow second runs, and
    the scheduler is told early; on a large one (``early`` false) neither happens."""
    from hpcfutures._facade.core.batching import small_launch
    from hpcfutures._remote.express import Early

    assert small_launch(50) and not small_launch(51)
    sent, nudges = _run_on_a_worker_thread(early=True)
    assert [(early.first, early.outcomes) for early in sent if isinstance(early, Early)][:1] \
        == [(0, [None])], sent
    assert nudges == [1]
    assert _run_on_a_worker_thread(early=False) == ([], [])


@pytest.mark.parametrize("early", [True, False])
def test_a_chunk_gives_back_the_items_behind_a_slow_one_on_any_launch(early):
    """The items after one that has run GIVE_BACK_AFTER s (and ten times the mean) are
    given back, none of them run here: the word travels with the outcomes before them,
    and the chunk's outcome holds the values up to the slow item, with no error."""
    from hpcfutures._remote.express import Early

    ran: list = []
    sent, _ = _run_on_a_worker_thread(early=early, may_give_back=True, ran=ran)
    word = [early for early in sent if isinstance(early, Early) and early.rest is not None]
    assert [early.rest for early in word] == [2], sent
    [outcome] = ran
    assert outcome.values == [None, None] and outcome.error is None, outcome


@pytest.mark.parametrize(("expect", "given_back"), [(0.0, True), (None, False), ("item", False)])
def test_a_chunk_keeps_items_as_long_as_the_client_sized_it_for(expect, given_back):
    """Items that each take what the client expected stay together (a large launch sizes
    its chunks for seconds of work: giving back behind each would cut every chunk to one
    item); the first item gives the rest back only when it runs ten times longer than
    expected; with no estimate nothing goes back before one item has ended."""
    import time

    from hpcfutures._remote import express
    from hpcfutures._remote.calls import run_chunk
    from hpcfutures._remote.express import Early

    seconds = scaled(3 * express.GIVE_BACK_AFTER)
    expected = seconds if expect == "item" else expect
    sent: list = []
    outcomes: list = []
    express.set_sender(lambda payload: None,
                       lambda: (lambda: "chunk-key", lambda key, payload: sent.append(
                           pickle.loads(payload)), lambda: None))
    try:
        thread = threading.Thread(target=lambda: outcomes.append(run_chunk(
            time.sleep, [(seconds,)] * 3, expect=expected)))
        thread.start()
        thread.join(scaled(30))
        assert not thread.is_alive(), "the chunk did not end"
    finally:
        express.set_sender(None)
    rests = [early.rest for early in sent if isinstance(early, Early) and early.rest is not None]
    assert rests == ([1] if given_back else []), sent
    assert len(outcomes[0].values) == (1 if given_back else 3), outcomes
