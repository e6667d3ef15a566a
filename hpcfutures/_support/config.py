"""Settings, resolved once: keyword argument > ``HPCFUTURES_*`` variable > Dask config > default.

The result is a frozen :class:`Settings`; nothing else in the library reads the
environment for these options, so ``hpcfutures info`` can show each value and
where it came from.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import ConfigurationError

__all__ = ["SETTINGS_DOC", "Settings", "resolve_settings"]

ENV_PREFIX = "HPCFUTURES_"


def _to_bool(text: Any) -> bool:
    if isinstance(text, bool):
        return text
    value = str(text).strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected a boolean (1/0, true/false, yes/no), got {text!r}")


def _to_positive_float(text: Any) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError(f"must be greater than 0, got {text!r}")
    return value


def _to_positive_int(text: Any) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError(f"must be greater than 0, got {text!r}")
    return value


def _to_optional_str(text: Any) -> str | None:
    return None if text in (None, "") else str(text)


def _to_memory(text: Any) -> str | int | None:
    if text in (None, "", 0, "0"):
        return None
    if isinstance(text, int):
        return text
    return str(text)


#: The values a progress setting resolves to.
PROGRESS_MODES = ("off", "auto", "always")


def _to_progress(text: Any) -> str:
    """``'off'``, ``'auto'`` (a bar only on a terminal) or ``'always'``; booleans map
    to off and auto, so ``progress=True`` never writes into a log file."""
    if isinstance(text, str) and text.strip().lower() in PROGRESS_MODES:
        return text.strip().lower()
    try:
        return "auto" if _to_bool(text) else "off"
    except ValueError:
        raise ValueError(
            f"expected a boolean, 'auto' or 'always' (also on a non-terminal), got {text!r}"
        ) from None


@dataclasses.dataclass(frozen=True)
class _Option:
    name: str
    default: Any
    convert: Callable[[Any], Any]
    doc: str


_OPTIONS = (
    _Option("launcher", None, _to_optional_str,
            "Force a launcher plug-in: a built-in name (see 'hpcfutures info' and the docs' "
            "launcher list) or 'package.module:ClassName'; default: detect."),
    _Option("max_workers", None, _to_positive_int,
            "Worker processes started on the laptop default (default: one per core)."),
    _Option("timeout", 60.0, _to_positive_float,
            "Seconds any start-up wait may take before a StartupTimeoutError."),
    _Option("array_timeout", 3600.0, _to_positive_float,
            "Seconds job-array elements wait for each other (queues can take hours)."),
    _Option("scheduler_file", None, _to_optional_str,
            "Path (template: {launch_id}, {job_id}, {user}) of the scheduler file."),
    _Option("host", None, _to_optional_str,
            "Address the scheduler and workers bind to (default: loopback on one host)."),
    _Option("interface", None, _to_optional_str,
            "Network interface to bind to, e.g. ib0 (alternative to host)."),
    _Option("threads_per_worker", None, _to_positive_int,
            "Threads in each Dask worker (default: 1, or the launcher's CPUs per task)."),
    _Option("memory_limit", None, _to_memory,
            "Memory limit per worker, e.g. '4GiB' (default: the launcher's, else none)."),
    _Option("scheduler_in_client", False, _to_bool,
            "Run the scheduler inside the client process, so no rank is spent on it."),
    _Option("security", True, _to_bool,
            "TLS with per-launch credentials between all processes; false: plain TCP, "
            "so anyone who can reach the scheduler's port can run code as you."),
    _Option("exit_when_done", True, _to_bool,
            "Non-client ranks exit the process when the client is done; if false, "
            "__enter__ returns None on them instead."),
    _Option("progress", "off", _to_progress,
            "Progress bar for Executor.map, on stderr (needs tqdm): true or 'auto' shows it "
            "only when stderr is a terminal, 'always' also writes it to a file or pipe; "
            "map(..., progress=) overrides it per call."),
    _Option("dashboard", False, _to_bool,
            "Serve Dask's dashboard from the scheduler (needs bokeh); the client prints its "
            "address and an ssh tunnel command when it starts."),
    _Option("dashboard_address", "127.0.0.1:8787", _to_optional_str,
            "Where the dashboard listens, on the scheduler's host; loopback by default, "
            "reached through an ssh tunnel. A taken port is replaced by a free one."),
    _Option("summary", False, _to_bool,
            "When the client leaves the with block, print calls run and failed, calls "
            "re-run after a lost worker, each worker's busy time and the wall time."),
    _Option("log_dir", None, _to_optional_str,
            "Directory where every rank also writes its own log file, "
            "<dir>/<launch id>/rank-<rank>-<role>.log (default: none, only the tagged output)."),
    _Option("release_idle_after", None, _to_positive_float,
            "Seconds after which an idle worker retires and its rank exits 0, handing its "
            "resources back (useful when each worker is a job-array element); default: never."),
    _Option("min_workers", 1, _to_positive_int,
            "Workers kept however idle they are, when release_idle_after is set."),
)

SETTINGS_DOC = {option.name: option.doc for option in _OPTIONS}


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every option, resolved; ``sources`` says where each value came from."""

    launcher: str | None
    max_workers: int | None
    timeout: float
    array_timeout: float
    scheduler_file: str | None
    host: str | None
    interface: str | None
    threads_per_worker: int | None
    memory_limit: str | int | None
    scheduler_in_client: bool
    security: bool
    exit_when_done: bool
    progress: str
    dashboard: bool
    dashboard_address: str | None
    summary: bool
    log_dir: str | None
    release_idle_after: float | None
    min_workers: int
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)


def _dask_config() -> Mapping[str, Any]:
    """The ``hpcfutures:`` section of the user's Dask YAML, if dask can be imported."""
    try:
        import dask.config
    except ImportError:  # pragma: no cover - dask is a hard dependency
        return {}
    section = dask.config.get("hpcfutures", default={}) or {}
    return {key.replace("-", "_"): value for key, value in section.items()}


def resolve_settings(
    explicit: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    dask_config: Mapping[str, Any] | None = None,
) -> Settings:
    """Resolve every option once, in the documented order of precedence.

    ``explicit`` holds keyword arguments (``None`` means "not given").
    Raises :class:`ConfigurationError` naming the option and its source when a
    value cannot be converted.
    """
    explicit = {k: v for k, v in (explicit or {}).items() if v is not None}
    unknown = set(explicit) - set(SETTINGS_DOC)
    if unknown:
        raise ConfigurationError(f"unknown option(s): {', '.join(sorted(unknown))}")
    environ = os.environ if environ is None else environ
    dask_config = _dask_config() if dask_config is None else dask_config
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for option in _OPTIONS:
        env_name = ENV_PREFIX + option.name.upper()
        if option.name in explicit:
            raw, source = explicit[option.name], "keyword argument"
        elif environ.get(env_name, "") != "":
            raw, source = environ[env_name], f"environment variable {env_name}"
        elif dask_config.get(option.name) is not None:
            raw, source = dask_config[option.name], f"dask config hpcfutures.{option.name}"
        else:
            values[option.name], sources[option.name] = option.default, "default"
            continue
        try:
            values[option.name] = None if raw is None else option.convert(raw)
        except (TypeError, ValueError) as err:
            raise ConfigurationError(
                f"invalid value for {option.name!r} from {source}: {err}"
            ) from err
        sources[option.name] = source
    return Settings(**values, sources=sources)
