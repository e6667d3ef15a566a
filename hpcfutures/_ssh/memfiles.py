"""A launch's credentials, read on the cluster, kept in memory on this machine.

Dask's TLS settings take a PEM either as text, which Dask writes to a temporary
file while it builds each TLS context (Python's ``ssl`` loads a key only from a
file), or as a path.  On Linux the path can be an anonymous memory file
(``memfd_create``), which ``/proc/self/fd/N`` reopens: the key is then never
written to this machine's disk.  Elsewhere the text is passed on as it is.

Each distinct PEM gets one memory file for the life of the process: a number
freed and given to other credentials would meet Dask contexts cached under
the old path.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

__all__ = ["in_memory_files"]

_FILES: dict[str, str] = {}
_LOCK = threading.Lock()


def in_memory_files(credentials: Mapping[str, str]) -> dict[str, str]:
    """``credentials`` with each PEM replaced by the path of a memory file holding it
    (where the system has them); other values unchanged."""
    if not hasattr(os, "memfd_create") or not os.path.isdir("/proc/self/fd"):
        return dict(credentials)
    return {name: _memory_file(value) if "-----BEGIN" in value else value
            for name, value in credentials.items()}


def _memory_file(text: str) -> str:
    with _LOCK:
        path = _FILES.get(text)
        if path is None:
            fd = os.memfd_create("hpcfutures-credentials", os.MFD_CLOEXEC)
            os.write(fd, text.encode())
            path = _FILES[text] = f"/proc/self/fd/{fd}"
        return path
