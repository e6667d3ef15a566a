"""What a user reads: remote tracebacks, tagged output of ``hpcfutures run``, the verdict line."""

from __future__ import annotations

import importlib.util
import pickle
import re
import subprocess
import sys

import cloudpickle
from helpers import hpcfutures_run

import hpcfutures
from hpcfutures._remote.calls import restore_traceback, run_bundle

SCRIPT = '''\
def inner(x):
    return 1 / x


def outer(x):
    return inner(x)
'''


def _by_value(tmp_path, name):
    """A function of a script, sent the way cloudpickle sends ``__main__``'s: by value."""
    path = tmp_path / "user_script.py"
    path.write_text(SCRIPT)
    spec = importlib.util.spec_from_file_location("user_script", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["user_script"] = module
    try:
        spec.loader.exec_module(module)
        cloudpickle.register_pickle_by_value(module)
        try:
            return path, cloudpickle.loads(cloudpickle.dumps(getattr(module, name)))
        finally:
            cloudpickle.unregister_pickle_by_value(module)
    finally:
        del sys.modules["user_script"]


def test_remote_traceback_names_the_users_file_and_line_once(tmp_path):
    path, outer = _by_value(tmp_path, "outer")
    assert outer.__code__.co_filename == "<dynamic-code>"  # what cloudpickle does
    [(ok, error)] = run_bundle([(outer, (0,), {})]).results
    assert not ok
    # As Dask sends it: pickled with its traceback (tblib), then restored on the client.
    import distributed  # noqa: F401  (installs tblib's pickling of tracebacks)

    error = restore_traceback(pickle.loads(pickle.dumps(error)))
    assert type(error) is ZeroDivisionError
    text = str(error.__cause__)
    assert isinstance(error.__cause__, hpcfutures.RemoteTraceback)
    assert f'File "{path}", line 6, in outer\n    return inner(x)\n' in text, text
    assert f'File "{path}", line 2, in inner\n    return 1 / x\n' in text, text
    assert "<dynamic-code>" not in text and "run_bundle" not in text, text
    # The worker's frames are in the cause only, not again under the client's.
    assert error.__traceback__ is None


LAPTOP_SCRIPT = '''\
import hpcfutures


def fails(x):
    return 1 / x


if __name__ == "__main__":
    with hpcfutures.Executor(max_workers=1) as ex:
        ex.submit(fails, 0).result()
'''


def test_a_failing_laptop_script_reads_top_down(tmp_path):
    """One laptop run: the user's file in the remote traceback, each frame once, and
    nothing after the traceback."""
    script = tmp_path / "job.py"
    script.write_text(LAPTOP_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=90, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    err = done.stderr
    assert f'File "{script}", line 5, in fails\n    return 1 / x\n' in err, err
    assert err.count("in fails") == 1 and "<dynamic-code>" not in err, err
    assert "hpcfutures.RemoteTraceback" in err, err
    # The traceback is the whole story: the scheduler (in this process) says nothing
    # of its own about the client's failure.
    assert err.rstrip().endswith("ZeroDivisionError: division by zero"), err
    assert "ending the launch" not in err, err


CAUGHT_SCRIPT = '''\
import hpcfutures


def fails(x):
    return 1 / x


if __name__ == "__main__":
    try:
        with hpcfutures.Executor(max_workers=1) as ex:
            ex.submit(fails, 0).result()
    except ZeroDivisionError:
        print("CAUGHT")
'''


def test_a_laptop_script_that_catches_the_error_gets_no_verdict_at_exit(tmp_path):
    """The held verdict is for a program that the error ends; one that caught it
    goes on and ends well, and a line saying "the client failed" would be false."""
    script = tmp_path / "job.py"
    script.write_text(CAUGHT_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=90, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "CAUGHT" in done.stdout
    assert "ending the launch" not in done.stderr, done.stderr


TAGGED_SCRIPT = '''\
import sys

import hpcfutures

# Written a character at a time, by every rank at once: must come out whole.
for stream in (sys.stdout, sys.stderr):
    for char in "x" * 300 + "\\n":
        stream.write(char)
        stream.flush()
# scheduler_in_client as a keyword: hpcfutures run cannot know it, the copies tell it.
with hpcfutures.Executor(scheduler_in_client=True) as ex:
    print("total", sum(ex.map(abs, range(10))))
'''


def test_run_tags_every_line_of_every_rank_whole(tmp_path):
    script = tmp_path / "tagged.py"
    script.write_text(TAGGED_SCRIPT)
    job = hpcfutures_run(3, script, timeout=90)
    assert job.returncode == 0, job
    for stream in (job.stdout, job.stderr):
        lines = stream.splitlines()
        assert all(re.match(r"\[rank \d (scheduler|client|worker)\] ", line)
                   for line in lines), stream
        whole = [line for line in lines if line.endswith("] " + "x" * 300)]
        assert sorted(line.split()[1] for line in whole) == ["0", "1", "2"], stream
    assert "[rank 0 client] total 45" in job.stdout.splitlines(), job
