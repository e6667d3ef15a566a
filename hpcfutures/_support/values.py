"""One setting's value from whatever the user gave: text, a number, a boolean.

The converters that :mod:`.options` declares its kinds with, and that other
rooms use alone (a batch job's time limit, a ``progress=`` argument): each
accepts what a user would write, in Python or in an environment variable,
and says what it expected when it cannot.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable
from typing import Any

__all__ = ["PROGRESS_MODES", "to_args", "to_bool", "to_callable", "to_count", "to_epoch",
           "to_margin", "to_memory", "to_progress", "to_seconds", "to_text"]


def to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected a boolean (1/0, true/false, yes/no), got {value!r}")


def to_count(value: Any) -> int:
    """A whole number greater than 0 (``"4"`` or ``4``; not ``4.5`` or ``True``)."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"expected a whole number, got {value!r}")
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a whole number, got {value!r}") from None
    if count <= 0:
        raise ValueError(f"must be greater than 0, got {value!r}")
    return count


def to_seconds(value: Any, *, zero_ok: bool = False) -> float:
    """Seconds from a number, a :class:`~datetime.timedelta` or a duration such as
    ``"90s"``, ``"5min"`` or ``"1h"``: what :func:`dask.utils.parse_timedelta`
    reads (``"5m"``, ``"2 hours"``, ``"250ms"``), and ``min`` for minutes."""
    if isinstance(value, bool):
        seconds = math.nan
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    else:
        seconds = _parse_duration(str(value))
    if math.isnan(seconds):
        raise ValueError(f"expected seconds or a duration such as '90s', '5min' or '1h', "
                         f"got {value!r}")
    if seconds < 0 or (seconds == 0 and not zero_ok):
        raise ValueError(f"must be {'at least' if zero_ok else 'greater than'} 0, got {value!r}")
    return seconds


def to_margin(value: Any) -> float:
    """Seconds as :func:`to_seconds` reads them, where 0 is allowed (it means "never")."""
    return to_seconds(value, zero_ok=True)


def _parse_duration(text: str) -> float:
    """Seconds in ``text``; NaN when it is not a duration."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    if text.startswith("-"):
        return -_parse_duration(text[1:])
    if not text or not text[0].isdigit():  # Dask would read "h" as "1h"
        return math.nan
    from dask.utils import parse_timedelta

    # Dask knows "m" and "minutes" but not the common "min".
    text = re.sub(r"(?i)(?<=[\d\s.])mins?$", "minutes", text)
    try:
        return float(parse_timedelta(text))
    except (KeyError, ValueError, TypeError, IndexError):
        return math.nan


def to_epoch(value: Any) -> float:
    """Seconds since the epoch from a number, ``"1796071986"``, or an ISO time such as
    ``"2026-11-30T21:30:00"`` (without a zone: local time, as batch systems write it)."""
    if isinstance(value, bool):
        raise ValueError(f"expected epoch seconds or an ISO time, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError("expected epoch seconds or an ISO time such as "
                         f"2026-11-30T21:30:00, got {value!r}") from None


def to_callable(value: Any) -> Callable[..., Any]:
    if not callable(value):
        raise ValueError(f"expected a callable, got {value!r}")
    return value


def to_args(value: Any) -> tuple:
    """The arguments of a callable option, as a tuple (any iterable is accepted)."""
    if isinstance(value, (str, bytes)):  # iterable, but surely not meant as arguments
        raise ValueError(f"expected a tuple of arguments, got {value!r}")
    try:
        return tuple(value)
    except TypeError:
        raise ValueError(f"expected a tuple of arguments, got {value!r}") from None


def to_text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def to_memory(value: Any) -> int | float | str | None:
    """A worker's memory limit, checked where the settings are resolved.

    A size (``"4GiB"``, ``"500 MB"``, read by :func:`dask.utils.parse_bytes`)
    or a number of bytes becomes an int; ``"auto"`` and fractions of the host's
    memory (``0.5``) stay what they are, for Dask to apply on the worker's own
    host; ``0`` or ``""`` means no limit.
    """
    problem = ("expected a size such as '4GiB' or '500MB', a number of bytes, 'auto' or a "
               f"fraction of the host's memory such as 0.5, got {value!r}")
    if isinstance(value, bool):
        raise ValueError(problem)
    text = str(value).strip()
    if text.lower() == "auto":
        return "auto"
    if isinstance(value, (int, float)):
        number: float | None = float(value)
    else:
        try:
            number = float(text) if text else 0.0
        except ValueError:
            number = None
    if number is None:
        from dask.utils import parse_bytes

        try:
            number = float(parse_bytes(text))
        except (ValueError, TypeError):
            raise ValueError(problem) from None
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise ValueError(f"must be a positive size, got {value!r}")
    if number == 0:
        return None
    if number <= 1:
        return number  # Dask: a fraction of the worker's host memory
    return int(number)


#: The values a progress setting resolves to.
PROGRESS_MODES = ("off", "auto", "always")


def to_progress(value: Any) -> str:
    """``'off'``, ``'auto'`` (a bar only on a terminal) or ``'always'``; booleans map
    to off and auto, so ``progress=True`` never writes into a log file."""
    if isinstance(value, str) and value.strip().lower() in PROGRESS_MODES:
        return value.strip().lower()
    try:
        return "auto" if to_bool(value) else "off"
    except ValueError:
        raise ValueError(
            f"expected a boolean, 'auto' or 'always' (also on a non-terminal), got {value!r}"
        ) from None
