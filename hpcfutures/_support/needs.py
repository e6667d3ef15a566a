"""What a call needs (cores, GPUs, memory), and what a worker has, in Dask's terms.

A worker declares what it has as Dask worker *resources*, and a call that
says what it needs carries Dask task resource restrictions: Dask then runs it
only on a worker that has that much, and counts it as taken while it runs
(among the calls that state needs; a plain call takes a thread, as always).
The names here are the only place the two sides agree on.  Pure data.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["CORES", "GPUS", "MEMORY", "Needs", "describe_resources", "fits"]

#: Worker resource: its threads.
CORES = "cores"
#: Worker resource: the GPUs it owns.
GPUS = "gpus"
#: Worker resource: its memory limit in bytes (or its host's memory, without one).
MEMORY = "memory"


def _count(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be 0 or more, got {value}")
    return value or None


def _bytes(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"memory must be a number of bytes or a size like '4GB', got {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        from dask.utils import parse_bytes

        try:
            number = float(parse_bytes(value))
        except (ValueError, TypeError):
            raise ValueError(f"memory must be a number of bytes or a size like '4GB', got "
                             f"{value!r}") from None
    else:
        raise TypeError(f"memory must be a number of bytes or a size like '4GB', got "
                        f"{type(value).__name__}")
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise ValueError(f"memory must be a size of 0 or more, got {value!r}")
    return int(number) or None


@dataclasses.dataclass(frozen=True)
class Needs:
    """What one call (or one rank of an MPI task) needs; None: nothing said."""

    cores: int | None = None
    gpus: int | None = None
    memory: int | None = None

    @classmethod
    def of(cls, cores: Any = None, gpus: Any = None, memory: Any = None) -> Needs:
        """Checked needs: ``cores``/``gpus`` counts, ``memory`` bytes or a size ('4GB')."""
        return cls(_count("cores", cores), _count("gpus", gpus), _bytes(memory))

    @classmethod
    def from_resources(cls, resources: Mapping[str, float]) -> Needs:
        """The needs behind Dask resource restrictions (what :meth:`resources` made)."""
        return cls(*(int(resources.get(name) or 0) or None for name in (CORES, GPUS, MEMORY)))

    def __bool__(self) -> bool:
        return any(value for value in dataclasses.astuple(self))

    def resources(self) -> dict[str, float] | None:
        """Dask's task resource restrictions; None for a call that needs nothing."""
        found = {name: float(value) for name, value in
                 ((CORES, self.cores), (GPUS, self.gpus), (MEMORY, self.memory)) if value}
        return found or None

    def __str__(self) -> str:
        parts = []
        if self.cores:
            parts.append(f"cores={self.cores}")
        if self.gpus:
            parts.append(f"gpus={self.gpus}")
        if self.memory:
            parts.append(f"memory={_size(self.memory)}")
        return ", ".join(parts) or "nothing"


def fits(needs: Needs, resources: Mapping[str, float]) -> bool:
    """Whether a worker that has ``resources`` can ever run a call that needs ``needs``."""
    wanted = needs.resources() or {}
    return all(resources.get(name, 0) >= amount for name, amount in wanted.items())


def describe_resources(resources: Mapping[str, float]) -> str:
    """A worker's resources as a user reads them: ``cores=4, gpus=1, memory=2.0 GiB``."""
    cores = int(resources.get(CORES, 0))
    gpus = int(resources.get(GPUS, 0))
    memory = int(resources.get(MEMORY, 0))
    return f"cores={cores}, gpus={gpus}, memory={_size(memory) if memory else 'unknown'}"


def _size(n: int) -> str:
    from dask.utils import format_bytes

    return str(format_bytes(n))
