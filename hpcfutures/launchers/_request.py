"""What a job asks of any batch system: nodes, tasks, time, memory, GPUs; and the
values users write for them ("1-01:02:03", "16GB"), read once, the same for every system."""

from __future__ import annotations

import dataclasses
import re

__all__ = ["Request", "format_hms", "memory_megabytes", "parse_walltime", "with_components"]


def parse_walltime(value: float | int | str | None) -> int | None:
    """Seconds from ``"[D-]HH:MM:SS"``, ``"MM:SS"`` (as Slurm reads it), seconds, or "90min"."""
    if value is None:
        return None
    if isinstance(value, str) and ":" in value:
        match = re.fullmatch(r"\s*(?:(\d+)-)?(?:(\d+):)?(\d+):(\d{1,2})\s*", value)
        if match is None:
            raise ValueError(f"time: expected [D-]HH:MM:SS or MM:SS, got {value!r}")
        days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
        total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    else:
        from .._support.values import to_seconds

        try:
            total = round(to_seconds(value))
        except ValueError as err:
            raise ValueError(f"time: {err}") from None
    if total <= 0:
        raise ValueError(f"time must be greater than 0, got {value!r}")
    return total


def format_hms(seconds: int) -> str:
    """``HH:MM:SS`` (hours may exceed 24), as Grid Engine and PBS read it."""
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


_UNITS = {"": 1 / 2**20, "b": 1 / 2**20, "k": 1 / 1024, "kb": 1 / 1024, "m": 1, "mb": 1,
          "g": 1024, "gb": 1024, "t": 2**20, "tb": 2**20}


def memory_megabytes(value: int | str | None) -> int | None:
    """Megabytes (MiB) from bytes or a size such as ``"4GB"``, ``"500M"``, ``"16G"``."""
    if value is None:
        return None
    if isinstance(value, int):
        text = str(value)
    else:
        text = str(value).strip().lower().replace("i", "")
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?b?)", text)
    if match is None or float(match[1]) <= 0:
        raise ValueError(f"memory: expected a size such as '4GB' or '500MB', got {value!r}")
    return max(1, round(float(match[1]) * _UNITS[match[2]]))


@dataclasses.dataclass(frozen=True)
class Request:
    """What to ask the batch system for, in its own words nowhere: every system reads it."""

    nodes: int = 1
    tasks_per_node: int = 1
    time: int | None = None             # seconds
    partition: str | None = None         # Slurm partition; Grid Engine, PBS, LSF queue
    account: str | None = None
    memory: int | None = None            # MiB per node
    gpus: int | None = None              # per node
    name: str = "hpcfutures"
    output: str | None = None            # the job's output file (stdout and stderr)
    directives: tuple[str, ...] = ()     # lines passed through unchanged
    array: int | None = None             # a job array of this many elements
    parallel_environment: str | None = None  # Grid Engine only
    workdir: str | None = None
    #: The further components of a heterogeneous job (Slurm's ``hetjob``), each with
    #: its own nodes, tasks_per_node, memory and gpus; this request is the first.
    components: tuple[Request, ...] = ()

    def __post_init__(self) -> None:
        for name in ("nodes", "tasks_per_node", "gpus", "array"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < (0 if name == "gpus" else 1)):
                raise ValueError(f"{name} must be a whole number greater than 0, got {value!r}")

    @property
    def tasks(self) -> int:
        return self.nodes * self.tasks_per_node + sum(c.tasks for c in self.components)


#: What each component of ``allocate(workers=[...])`` may say.
COMPONENT_KEYS = ("nodes", "tasks_per_node", "memory", "gpus")


def with_components(request: Request, workers: list[dict]) -> Request:
    """``request`` shaped as a heterogeneous job: one component per dict of ``workers``
    (``{"nodes": 2, "tasks_per_node": 4, "gpus": 4, "memory": "64GB"}``)."""
    if not workers:
        raise ValueError("workers: expected a list of components such as "
                         "[{'nodes': 4, 'tasks_per_node': 32}, {'nodes': 2, 'gpus': 4}], got []")
    shaped = []
    for position, component in enumerate(workers):
        if not isinstance(component, dict):
            raise TypeError(f"workers[{position}]: expected a dict, got "
                            f"{type(component).__name__}")
        unknown = sorted(set(component) - set(COMPONENT_KEYS))
        if unknown:
            raise ValueError(f"workers[{position}]: unknown key(s) {', '.join(unknown)}; a "
                             f"component may say {', '.join(COMPONENT_KEYS)}")
        memory = memory_megabytes(component.get("memory"))
        shaped.append(dataclasses.replace(
            request, nodes=component.get("nodes", 1),
            tasks_per_node=component.get("tasks_per_node", 1), memory=memory,
            gpus=component.get("gpus"), directives=(), components=()))
    first = dataclasses.replace(shaped[0], directives=request.directives)
    return dataclasses.replace(first, components=tuple(shaped[1:]))
