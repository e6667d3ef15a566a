"""The one line that tells the user where Dask's dashboard is, and how to reach it.

The dashboard is served by the scheduler, which may be another rank on another
node, and by default listens on that node's loopback only (off the network,
though every user of that node can read it).  So the client asks the scheduler where it
listens (:func:`hpcfutures._dask.dashboard_facts`) and prints the address
together with the ``ssh -L`` command that brings it to the user's own machine.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["announce_dashboard", "dashboard_line"]

logger = logging.getLogger("hpcfutures")

_WILDCARDS = {"", "0.0.0.0", "::"}


def _bracket(host: str) -> str:
    """An IPv6 address in brackets, as URLs and ``ssh -L`` want it."""
    return f"[{host}]" if ":" in host else host


def dashboard_line(facts: Mapping[str, Any]) -> str:
    """"Dask dashboard at <url> (on <host>); from your machine: ssh -L ..." as one line."""
    host, bound, port = facts["host"], facts.get("address") or "", facts["port"]
    wildcard = bound in _WILDCARDS
    url = f"http://{_bracket(host if wildcard else bound)}:{port}/status"
    target = "localhost" if wildcard else _bracket(bound)
    tunnel = f"ssh -L {port}:{target}:{port} {host}"
    return (f"hpcfutures: Dask dashboard at {url} (on {host}); from your machine: "
            f"{tunnel}, then open http://localhost:{port}/status")


def announce_dashboard(facts: Mapping[str, Any] | None, stream: Any = None) -> None:
    """Print the dashboard line, or one warning saying why there is no dashboard."""
    if facts is None:
        logger.warning("dashboard=True, but the scheduler did not say where its dashboard "
                       "is (it did not answer in time)")
    elif not facts.get("bokeh"):
        logger.warning("dashboard=True, but bokeh is not installed where the scheduler runs, "
                       "so there is no dashboard: pip install bokeh (or "
                       "'hpcfutures[dashboard]')")
    elif facts.get("cannot_stop"):
        logger.warning("dashboard=True, but the scheduler left it off: %s", facts["cannot_stop"])
    elif not facts.get("served") or not facts.get("port"):
        logger.warning("dashboard=True here, but the scheduler was started without it: set "
                       "HPCFUTURES_DASHBOARD=1 (or dashboard=True) for every rank")
    else:
        print(dashboard_line(facts), file=stream or sys.stderr, flush=True)
