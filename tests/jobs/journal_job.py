"""Two runs over one journal: JOURNAL MARKERS first|second.

Every execution of a call leaves a marker file, so the test can count how
often each call ran.  The first run also checks that an unusable journal
path is refused at ``__enter__``.
"""

import concurrent.futures as cf
import os
import sys
import uuid
from pathlib import Path

import hpcfutures


def square(x, markers):
    Path(markers, f"square-{x}-{uuid.uuid4().hex}").touch()
    return x * x


def fails(x, markers):
    Path(markers, f"fails-{x}-{uuid.uuid4().hex}").touch()
    raise ValueError(x)


def add(a, b):
    return a + b


def main(journal, markers, phase):
    if phase == "first":
        blocker = Path(markers, "a-file")
        blocker.write_text("")
        try:
            with hpcfutures.Executor(1, journal=str(blocker / "journal")):
                print("UNWRITABLE accepted", flush=True)
        except hpcfutures.ConfigurationError as err:
            print("UNWRITABLE refused", str(blocker) in str(err), flush=True)
    with hpcfutures.Executor(journal=journal) as ex:
        first = ex.submit(square, 100, markers)
        print("AT ONCE", first.done(), flush=True)
        results = list(ex.map(square, range(30), [markers] * 30, timeout=60))
        print("MAP", results == [x * x for x in range(30)], flush=True)
        print("DEPENDENT", ex.submit(add, first, 1).result(timeout=60), flush=True)
        failing = ex.submit(fails, 1, markers)
        print("FAILS", type(failing.exception(timeout=60)).__name__, flush=True)
        some = [ex.submit(square, x, markers) for x in (0, 1, 2)]
        done = sorted(f.result() for f in cf.as_completed(some, timeout=60))
        print("AS_COMPLETED", done, "rank", os.environ.get("HPCFUTURES_RANK"), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
