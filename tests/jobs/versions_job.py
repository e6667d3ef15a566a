"""Worker ranks that report other versions than their scheduler (issue 27).

    hpcfutures run -n N python tests/jobs/versions_job.py RANKS

The worker ranks listed in RANKS (comma-separated) fake other versions through
the test seam HPCFUTURES_FAKE_VERSIONS, set before they start.  The client
prints "VERSIONS MISMATCH <message>" if its executor refused to start, else
maps and prints "VERSIONS MAPPED <ok>".
"""

import logging
import os
import sys
import threading

import hpcfutures


class WarnedOfOtherVersions(logging.Handler):
    """Set once the client warns that a worker on other versions stayed out."""

    def __init__(self) -> None:
        super().__init__()
        self.heard = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "versions differ" in record.getMessage():
            self.heard.set()


if os.environ.get("HPCFUTURES_RANK") in sys.argv[1].split(","):
    os.environ["HPCFUTURES_FAKE_VERSIONS"] = "python=3.9,cloudpickle=0.0.1"
warned = WarnedOfOtherVersions()
logging.getLogger("hpcfutures").addHandler(warned)

try:
    with hpcfutures.Executor() as ex:
        ok = list(ex.map(abs, [-1, -2, 3])) == [1, 2, 3]
        print(f"VERSIONS MAPPED {ok}", flush=True)
        # The worker on other versions starts when it starts: on a loaded machine after
        # this map. The test reads the client's warning about it, so wait for that.
        warned.heard.wait(60)
except hpcfutures.VersionMismatchError as err:
    print(f"VERSIONS MISMATCH {err}", flush=True)
