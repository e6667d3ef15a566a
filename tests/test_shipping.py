"""A batch's function is pickled once on the client and loaded once per worker."""

from __future__ import annotations

import pickle
import sys
import types
from types import SimpleNamespace

import cloudpickle
import pytest
from helpers import engine_stub

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
    from hpcfutures._facade.core.futures import TaskFuture
    from hpcfutures._facade.core.sending import Sender

    sent = []

    class Client:
        def map(self, runner, fns, argss, kwargss, key, pure):
            sent.extend(fns)
            return [object() for _ in key]

    counted = CountedPickles()
    sender = Sender(Client(), engine_stub(completions=SimpleNamespace(follow=lambda *_: None)))
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


def add(a, b=0):
    return a + b


def test_an_unpicklable_argument_is_named_by_its_place_and_type_not_by_dasks_wrapper():
    """Issue 29: the error named Dask's internal "LLGExpr" and not the argument."""
    import threading

    lock = threading.Lock()
    with hpcfutures.Executor(max_workers=1) as ex:
        positional = ex.submit(add, 1, lock).exception(timeout=60)
        keyword = ex.submit(add, 1, b=lock).exception(timeout=60)
        with pytest.raises(hpcfutures.SerializationError) as caught:
            list(ex.map(add, [1, 2, 3], [4, lock, 6]))
        in_map = caught.value
        assert ex.submit(add, 2, 3).result(timeout=60) == 5  # still usable
    for error, where in ((positional, "positional argument 2 (a _thread.lock)"),
                         (keyword, "keyword argument 'b' (a _thread.lock)"),
                         (in_map, "map item's argument 2 (a _thread.lock)")):
        assert isinstance(error, hpcfutures.SerializationError), error
        text = str(error)
        assert f"could not send task 'add' to the cluster: its {where} cannot be pickled" \
            in text, text
        assert "LLGExpr" not in text and "cannot pickle '_thread.lock' object" in text, text


def raise_from_a_module_only_the_workers_have(folder, fail):
    """Import a module from ``folder`` (the client never does) and raise its error."""
    import sys as worker_sys

    if folder not in worker_sys.path:
        worker_sys.path.insert(0, folder)
    import hpcf_worker_only  # on the worker only, on purpose

    if fail:
        raise hpcf_worker_only.SiteError("the detector is offline")
    return "fine"


def test_an_exception_whose_class_the_client_cannot_import_keeps_its_name(tmp_path, caplog):
    """Issue 29: the future got a bare ModuleNotFoundError, and Dask logged three
    CRITICAL 'Failed to deserialize' tracebacks."""
    (tmp_path / "hpcf_worker_only.py").write_text(
        "class SiteError(Exception):\n    pass\n")
    folder = str(tmp_path)
    assert "hpcf_worker_only" not in sys.modules
    with hpcfutures.Executor(max_workers=1) as ex:
        error = ex.submit(raise_from_a_module_only_the_workers_have, folder, True).exception(
            timeout=60)
        results = ex.map(raise_from_a_module_only_the_workers_have, [folder] * 3,
                         [False, False, True], chunksize=3)
        assert next(results) == "fine" and next(results) == "fine"
        with pytest.raises(hpcfutures.RemoteExceptionError) as caught:
            next(results)
        in_map = caught.value
        assert ex.submit(add, 1, 2).result(timeout=60) == 3  # the executor is usable
    for err in (error, in_map):
        assert isinstance(err, hpcfutures.RemoteExceptionError), repr(err)
        assert err.type_name == "hpcf_worker_only.SiteError"
        assert err.message == "the detector is offline"
        assert str(err).startswith("hpcf_worker_only.SiteError: the detector is offline (")
        assert "No module named 'hpcf_worker_only'" in str(err)
        assert isinstance(err.__cause__, hpcfutures.RemoteTraceback)
        assert "raise hpcf_worker_only.SiteError" in str(err.__cause__)
    assert "hpcf_worker_only" not in sys.modules
    assert not [r for r in caplog.records if r.levelname in ("CRITICAL", "ERROR")], \
        [r.getMessage() for r in caplog.records]
