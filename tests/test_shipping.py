"""A batch's function is pickled once on the client and loaded once per worker."""

from __future__ import annotations

import pickle
import sys
import types

import cloudpickle

import hpcfutures
from hpcfutures._remote import shipping
from hpcfutures._remote.calls import run_chunk_task, run_task
from hpcfutures._remote.deathwatch import function_name
from hpcfutures._remote.shipping import ShippedFunction


def script_function():
    """A function as a user's script defines it: cloudpickle pickles it by value."""
    module = types.ModuleType("__hpcf_script__")
    exec("def scaled(x, by=2):\n    return x * by\n", module.__dict__)
    sys.modules.pop("__hpcf_script__", None)  # not importable: pickled by value
    return module.scaled


class CountedPickles:
    """A callable that counts how often it is pickled (in this process)."""

    pickled = 0

    def __call__(self, x):
        return x + 1

    def __reduce__(self):
        CountedPickles.pickled += 1
        return CountedPickles, ()


def test_a_shipped_function_pickles_as_its_bytes_and_loads_once_per_process():
    fn = script_function()
    shipped = ShippedFunction.of(fn)
    assert function_name(shipped) == function_name(fn) == "__hpcf_script__.scaled"
    again = pickle.loads(pickle.dumps(shipped))
    assert again.payload == shipped.payload and again.digest == shipped.digest
    loaded = again.load()
    assert loaded(3) == 6 and loaded is pickle.loads(pickle.dumps(shipped)).load()
    assert run_task(again, (4,), {"by": 3}) == 12
    assert run_chunk_task(again, ([(1,), (2,)],), {}).values == [2, 4]


def test_a_function_that_cannot_be_loaded_is_the_calls_error_not_the_workers():
    shipped = ShippedFunction.of(len)
    shipped.payload, shipped.digest = cloudpickle.dumps(len)[:-3], "broken"
    outcome = run_chunk_task(shipped, ([(1,), (2,)],), {})
    assert outcome.values == [] and isinstance(outcome.error, pickle.UnpicklingError)


def test_the_workers_keep_a_bounded_number_of_functions(monkeypatch):
    monkeypatch.setattr(shipping, "KEPT", 3)
    monkeypatch.setattr(shipping, "_loaded", type(shipping._loaded)())
    monkeypatch.setattr(shipping, "_loaded_bytes", 0)
    for by in range(5):
        ShippedFunction.of(lambda x, by=by: x * by).load()
    assert len(shipping._loaded) == 3
    assert shipping._loaded_bytes == sum(size for _, size in shipping._loaded.values())


def test_a_batch_carries_its_function_pickled_once_for_all_its_tasks():
    """Dask pickles each task apart from the scheduler to a worker: the tasks of a
    batch share one ShippedFunction (bytes), made once, never the function itself."""
    from hpcfutures._facade.futures import TaskFuture
    from hpcfutures._facade.sending import Sender

    sent = []

    class Client:
        def map(self, runner, fns, argss, kwargss, key, pure):
            sent.extend(fns)
            return [object() for _ in key]

    counted = CountedPickles()
    sender = Sender(Client(), follow=lambda dask_future, future: None, send_now=print)
    CountedPickles.pickled = 0
    sender.send_queued([(TaskFuture(), run_chunk_task, counted, ([(i,)],), {}, False)
                        for i in range(50)])
    assert len(sent) == 50 and all(fn is sent[0] for fn in sent)
    assert isinstance(sent[0], ShippedFunction) and CountedPickles.pickled == 1
    assert pickle.loads(pickle.dumps(sent[0])).load()(1) == 2


def test_an_unpicklable_function_still_fails_its_call_with_a_clear_error():
    import threading

    lock = threading.Lock()
    with hpcfutures.Executor(max_workers=1) as ex:
        future = ex.submit(lambda: lock.locked())
        error = future.exception(timeout=60)
    assert isinstance(error, hpcfutures.SerializationError), error
    assert "could not send task" in str(error) and "<lambda>" in str(error)
