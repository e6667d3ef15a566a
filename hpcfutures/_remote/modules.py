"""The user's own modules travel by value with a function, where the workers lack them.

cloudpickle pickles a function by reference (its module's name and its own)
when its module can be imported, and by value (its code and the globals it
uses) when it is ``__main__`` or registered with
``cloudpickle.register_pickle_by_value``.  A function from a module only the
client has (a file next to a notebook on a laptop, a project folder the
cluster does not have, a folder put on ``sys.path`` by the client alone)
would fail every call on the workers with ``ModuleNotFoundError``.

The rule (docs/serving.rst, "Your own modules"): a top-level module is *the
user's own* when its file is Python source outside the interpreter's
installation (the standard library, site-packages, the user site) and no
editable install's import hook provides it.  One of the user's own modules
whose folder (where it was imported from) is not on the launch's import path
(its scheduler's ``sys.path``, published with its address: the launch's
processes import from there) travels by value, with its submodules.  Every
such module in ``sys.modules`` does, not only the function's, so that a
function that uses another one (``import helpers`` at the top of the module,
a notebook's function that calls a helper) finds it on the worker.
Everything else travels by reference, as cloudpickle sends it: installed packages, and
inside a job the modules next to the script (every rank has that folder).

Cost: each top-level module is classified once, when first seen (a batch
looks only at the names ``sys.modules`` gained since the last); a batch
registers the few modules to ship for its one ``cloudpickle.dumps`` (see
shipping.py) and unregisters them after, so nothing else of the process's
pickling changes.
"""

from __future__ import annotations

import contextlib
import os
import site
import sys
import sysconfig
import threading
import types
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import cloudpickle

__all__ = ["note_import_path", "pickled_by_value", "to_ship"]

#: Never shipped: the script itself (cloudpickle ships its functions anyway),
#: and the packages every process of a launch runs (their versions are checked).
NEVER = frozenset({"__main__", "__mp_main__", "hpcfutures", "distributed", "dask",
                   "cloudpickle"})

_lock = threading.Lock()
#: Held while modules are registered by value (re-entrant: a user's ``__reduce__``
#: run by the pickling may itself pickle).
_registering = threading.RLock()
#: Per Dask client: the folders its launch's processes import from.
_import_paths: weakref.WeakKeyDictionary[Any, frozenset[str]] = weakref.WeakKeyDictionary()
#: Top-level module names looked at, and of those the user's own: (module, its folder).
_seen: set[str] = set()
_own: dict[str, tuple[types.ModuleType, str]] = {}
_seen_count = 0
_installation: tuple[str, ...] | None = None


def note_import_path(owner: Any, entries: Iterable[str]) -> None:
    """Remember where the processes of ``owner``'s launch (a Dask client) import from."""
    with _lock:
        _import_paths[owner] = frozenset(os.path.normpath(entry) for entry in entries)


def to_ship(owner: Any) -> list[types.ModuleType]:
    """The user's own top-level modules that ``owner``'s launch cannot import (all the
    user's own modules where its import path is unknown)."""
    try:
        path = _import_paths.get(owner)
    except TypeError:  # not weakly referenceable: no launch noted
        path = None
    with _lock:
        _classify_new_modules()
        own = list(_own.values())
    return [module for module, folder in own
            if (path is None or folder not in path) and sys.modules.get(module.__name__)
            is module]


@contextlib.contextmanager
def pickled_by_value(modules: Sequence[types.ModuleType]) -> Iterator[None]:
    """cloudpickle pickles ``modules`` (and their submodules) by value inside the block."""
    if not modules:
        yield
        return
    with _registering:
        registered = cloudpickle.list_registry_pickle_by_value()
        added = []
        try:
            for module in modules:
                if module.__name__ not in registered:
                    with contextlib.suppress(ValueError):  # gone from sys.modules since
                        cloudpickle.register_pickle_by_value(module)
                        added.append(module)
            yield
        finally:
            for module in added:
                with contextlib.suppress(ValueError):
                    cloudpickle.unregister_pickle_by_value(module)


def _classify_new_modules() -> None:
    """Look at the top-level modules that appeared since the last look (lock held)."""
    global _seen_count
    modules = sys.modules
    replaced = False
    for name, (module, _) in list(_own.items()):  # forget those removed (or imported anew)
        if modules.get(name) is not module:
            del _own[name]
            _seen.discard(name)
            replaced = True
    if len(modules) == _seen_count and not replaced:
        return
    for name in [name for name in list(modules) if "." not in name and name not in _seen]:
        _seen.add(name)
        candidate = modules.get(name)
        if isinstance(candidate, types.ModuleType):
            folder = _own_folder(name, candidate)
            if folder is not None:
                _own[name] = (candidate, folder)
    _seen_count = len(modules)


def _own_folder(name: str, module: types.ModuleType) -> str | None:
    """The folder a user's own module was imported from; None for any other module."""
    if name in NEVER or name in sys.builtin_module_names or name in getattr(
            sys, "stdlib_module_names", ()):
        return None
    file = getattr(module, "__file__", None)
    # A C extension, a namespace package, a frozen or zipped module: by reference.
    if not isinstance(file, str) or not file.endswith(".py") or not os.path.isfile(file):
        return None
    file = os.path.normpath(os.path.abspath(file))
    if file.startswith(_installed_folders()) or _from_editable_install(name, file):
        return None
    folder = os.path.dirname(file)
    return os.path.dirname(folder) if hasattr(module, "__path__") else folder


def _installed_folders() -> tuple[str, ...]:
    """Where the interpreter's installation keeps modules, each ending in a separator."""
    global _installation
    if _installation is None:
        paths = sysconfig.get_paths()
        folders = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
        with contextlib.suppress(Exception):  # old virtualenvs' site lacks these
            folders.update(site.getsitepackages())
            folders.add(site.getusersitepackages())
        folders.update(entry for entry in sys.path if isinstance(entry, str)
                       and os.path.basename(entry.rstrip(os.sep)) in ("site-packages",
                                                                      "dist-packages"))
        _installation = tuple(os.path.join(os.path.normpath(os.path.abspath(folder)), "")
                              for folder in folders if folder)
    return _installation


def _from_editable_install(name: str, file: str) -> bool:
    """Whether an editable install's import hook (``pip install -e``) provides ``file``."""
    for finder in sys.meta_path:
        kind = type(finder) if not isinstance(finder, type) else finder
        if "editable" not in f"{kind.__module__}.{kind.__qualname__}".lower():
            continue
        with contextlib.suppress(Exception):
            spec = finder.find_spec(name, None)
            origin = getattr(spec, "origin", None)
            if isinstance(origin, str) and os.path.normpath(os.path.abspath(origin)) == file:
                return True
    return False
