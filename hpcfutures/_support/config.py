"""Settings, resolved once: keyword argument > ``HPCFUTURES_*`` variable > Dask config > default.

The options themselves are declared in :mod:`.options`; the result is a
frozen :class:`Settings`.  Nothing else in the library reads the environment
for these options, so ``hpcfutures info`` can show each value and where it
came from.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._errors import ConfigurationError
from .options import BY_NAME, CONFIG_SECTION, OPTIONS, Option
from .variables import warn_unknown_variables

__all__ = ["Settings", "expand_template", "resolve_option", "resolve_settings",
           "resolve_settings_despite_errors"]


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every option, resolved; ``sources`` says where each value came from."""

    # BEGIN generated: settings -- python -m hpcfutures._support.option_sources --write
    max_workers: int | None
    launcher: str | None
    timeout: float
    array_timeout: float
    scheduler_file: str | None
    host: str | None
    interface: str | None
    threads_per_worker: int | None
    memory_limit: int | float | str | None
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
    end_time: float | None
    drain_margin: float | None
    requeue: bool
    max_requeues: int
    journal: str | None
    initializer: Callable[..., Any] | None
    initargs: tuple[Any, ...]
    # END generated: settings
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)


def _dask_config() -> Mapping[str, Any]:
    """The ``hpcfutures:`` section of the user's Dask YAML, if dask can be imported."""
    try:
        import dask.config
    except ImportError:  # pragma: no cover - dask is a hard dependency
        return {}
    section = dask.config.get(CONFIG_SECTION, default={}) or {}
    return {key.replace("-", "_"): value for key, value in section.items()}


def _resolve(option: Option, explicit: Mapping[str, Any], environ: Mapping[str, str],
             dask_config: Mapping[str, Any]) -> tuple[Any, str]:
    """(value, where it came from) of one option."""
    if not option.textual:
        _refuse_text(option, environ, dask_config)
    if option.name in explicit:
        raw, source = explicit[option.name], "keyword argument"
    elif environ.get(option.env_name, "") != "":
        raw, source = environ[option.env_name], f"environment variable {option.env_name}"
    elif dask_config.get(option.name) is not None:
        raw, source = dask_config[option.name], f"dask config {option.config_key}"
    else:
        return option.default, "default"
    try:
        return option.kind.convert(raw), source
    except (TypeError, ValueError) as err:
        raise ConfigurationError(
            f"invalid value for {option.name!r} from {source}: {err}; "
            f"for example {option.example_for(source)}"
        ) from err


def _refuse_text(option: Option, environ: Mapping[str, str],
                 dask_config: Mapping[str, Any]) -> None:
    """A Python object (a callable) given as text: say it can only be a keyword argument."""
    if environ.get(option.env_name, "") != "":
        source = f"environment variable {option.env_name}"
    elif dask_config.get(option.name) is not None:
        source = f"dask config {option.config_key}"
    else:
        return
    raise ConfigurationError(option.text_source_refused(source))


def resolve_settings(
    explicit: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    dask_config: Mapping[str, Any] | None = None,
) -> Settings:
    """Resolve every option once, in the documented order of precedence.

    ``explicit`` holds keyword arguments (``None`` means "not given").
    Raises :class:`ConfigurationError` naming the option, its source and a
    valid example when a value cannot be converted.
    """
    explicit = {k: v for k, v in (explicit or {}).items() if v is not None}
    unknown = set(explicit) - set(BY_NAME)
    if unknown:
        raise ConfigurationError(f"unknown option(s): {', '.join(sorted(unknown))}")
    if environ is None:
        environ = os.environ
        warn_unknown_variables(environ)  # a mistyped option's variable is otherwise ignored
    dask_config = _dask_config() if dask_config is None else dask_config
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for option in OPTIONS:
        values[option.name], sources[option.name] = _resolve(option, explicit, environ,
                                                              dask_config)
    return Settings(**values, sources=sources)


def resolve_settings_despite_errors(
    environ: Mapping[str, str] | None = None,
) -> tuple[Settings, list[str]]:
    """Settings as :func:`resolve_settings` makes them, and the errors it would raise.

    An option whose value is invalid keeps its default, so that ``hpcfutures
    info`` can still show what it detected when the user most needs it.
    """
    environ = os.environ if environ is None else environ
    dask_config = _dask_config()
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    errors: list[str] = []
    for option in OPTIONS:
        try:
            values[option.name], sources[option.name] = _resolve(option, {}, environ,
                                                                  dask_config)
        except ConfigurationError as err:
            errors.append(str(err))
            values[option.name], sources[option.name] = option.default, "default (see error)"
    return Settings(**values, sources=sources), errors


def resolve_option(name: str, environ: Mapping[str, str] | None = None,
                   dask_config: Mapping[str, Any] | None = None) -> Any:
    """One option's value from the environment, Dask config or default.

    For a process that needs one setting without creating an executor
    (``hpcfutures run`` asks where the client will be).
    """
    environ = os.environ if environ is None else environ
    dask_config = _dask_config() if dask_config is None else dask_config
    return _resolve(BY_NAME[name], {}, environ, dask_config)[0]


def expand_template(template: str, fields: Mapping[str, str], option: str) -> Path:
    """A path option's value with ``{job_id}``, ``{user}`` and the like filled in.

    ``fields`` are the launch's (``launch_id``, ``user`` and what the launcher
    adds); ``~`` and ``$VARIABLES`` are expanded too.
    """
    try:
        text = template.format(**fields)
    except (KeyError, IndexError, ValueError) as err:
        raise ConfigurationError(
            f"{option} template {template!r} uses an unknown field {err}; "
            f"available: {', '.join('{' + k + '}' for k in sorted(fields))}"
        ) from err
    return Path(os.path.expandvars(os.path.expanduser(text)))
