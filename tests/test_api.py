"""The public surface: small, sorted, complete, and importable without side effects."""

import subprocess
import sys
import types

import hpcfutures


def test_all_is_sorted_and_complete():
    assert hpcfutures.__all__ == sorted(hpcfutures.__all__)
    # Submodules (the launchers package, the optional hpcfutures.cubed) are not API names.
    public = {name for name, value in vars(hpcfutures).items()
              if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert public == set(hpcfutures.__all__)


def test_errors_share_one_root_and_builtin_bases():
    from concurrent.futures import BrokenExecutor

    for name in hpcfutures.__all__:
        obj = getattr(hpcfutures, name)
        is_error = isinstance(obj, type) and issubclass(obj, Exception)
        if is_error and obj is not hpcfutures.RemoteTraceback:
            assert issubclass(obj, hpcfutures.HPCFuturesError), name
    assert issubclass(hpcfutures.StartupTimeoutError, TimeoutError)
    assert issubclass(hpcfutures.BrokenHPCExecutor, BrokenExecutor)


def test_import_starts_nothing_and_does_not_touch_mpi_or_dask():
    code = ("import sys, threading, hpcfutures; "
            "assert 'mpi4py' not in sys.modules, 'mpi4py imported'; "
            "assert 'distributed' not in sys.modules, 'distributed imported'; "
            "assert threading.active_count() == 1, 'a thread was started'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_executors_are_concurrent_futures_executors():
    from concurrent.futures import Executor

    for cls in (hpcfutures.Executor, hpcfutures.LocalExecutor,
                hpcfutures.SlurmExecutor, hpcfutures.MPIExecutor):
        assert issubclass(cls, Executor)


def test_errors_print_with_their_public_names():
    import pickle
    import traceback

    for name in hpcfutures.__all__:
        obj = getattr(hpcfutures, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert obj.__module__ == "hpcfutures", name
    error = hpcfutures.LauncherError("no launcher")
    assert traceback.format_exception_only(error) == ["hpcfutures.LauncherError: no launcher\n"]
    crash = pickle.loads(pickle.dumps(hpcfutures.WorkerCrashError("gone", where="rank 2")))
    assert type(crash) is hpcfutures.WorkerCrashError and crash.where == "rank 2"
