"""The loop thread behind the synchronous facade: what a caller on another thread sees."""

import asyncio

import pytest

from hpcfutures._support.loop import LoopThread


@pytest.fixture
def loop():
    thread = LoopThread("test-loop")
    yield thread
    thread.stop()


def test_run_sync_returns_the_coroutines_result(loop):
    async def answer():
        return 42

    assert loop.run_sync(answer(), 5) == 42


def test_a_deadline_that_passes_raises_the_builtin_timeout_error(loop):
    async def forever():
        await asyncio.Event().wait()

    with pytest.raises(TimeoutError, match=r"no answer within 0\.2 s"):
        loop.run_sync(forever(), 0.2)


def test_a_timeout_inside_the_coroutine_reaches_the_caller_as_the_builtin_timeout_error(loop):
    # Python 3.10's asyncio.TimeoutError is not the builtin one; the facade's callers catch
    # the builtin one, and would miss the other (a named startup error would become a crash).
    async def waits_too_short():
        await asyncio.wait_for(asyncio.Event().wait(), 0.05)

    with pytest.raises(TimeoutError) as caught:
        loop.run_sync(waits_too_short(), 5)
    assert type(caught.value) is TimeoutError
