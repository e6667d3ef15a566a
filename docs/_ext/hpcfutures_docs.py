"""Sphinx extension: the configuration reference, generated from the code.

``.. hpcfutures-options::`` renders one row per option declared in
``hpcfutures._support.options.OPTIONS`` (keyword, ``HPCFUTURES_*`` variable, Dask
config key, accepted values, default, meaning), so the table cannot drift
from what :func:`hpcfutures._support.config.resolve_settings` reads.

``.. hpcfutures-variables::`` renders the other ``HPCFUTURES_*`` variables,
which are described in :data:`OTHER_VARIABLES` below.  At build time every
``HPCFUTURES_*`` name that appears in the package's source must be either an
option's variable or listed there; otherwise the build warns (and fails under
``-W``), naming the variable, so a new one cannot go undocumented.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

#: HPCFUTURES_* variables that are not options: name -> (default, meaning).
OTHER_VARIABLES = {
    "HPCFUTURES_INTERLEAVE": (
        "unset",
        "For testing only: ``SEED:MAX`` pauses each rank at each step of finding the "
        "scheduler (before it reads the scheduler file, before it connects, while the "
        "scheduler closes) for up to ``MAX`` seconds, drawn from ``SEED``, so that "
        "``benchmarks/interleave.py`` can replay an order of events.",
    ),
    "HPCFUTURES_DASK_LOG_LEVEL": (
        "``WARNING``",
        "Level of Dask's own loggers (``distributed``, ``tornado``). At ``WARNING`` "
        "hpcfutures also drops Dask's duplicate reports of failed tasks and unpicklable "
        "objects, which reach you as the future's exception anyway; ``INFO`` or ``DEBUG`` "
        "shows everything.",
    ),
    "HPCFUTURES_REQUEUES": (
        "set by a PBS job's resubmission",
        "How many times a PBS job was submitted again by ``requeue=True`` (PBS gives "
        "each resubmission a new job id, and ``max_requeues`` counts on from this).",
    ),
    "HPCFUTURES_STALLED_RUNS": (
        "set by a PBS job's resubmission",
        "How many runs in a row of a resubmitted PBS job recorded no new result (what "
        "``max_requeues`` counts).",
    ),
    "HPCFUTURES_GPUS": (
        "unset: the GPUs the launcher names",
        "The GPUs of a node, such as ``0,1,2,3``, shared out among its worker ranks "
        "(``mpiexec``, ``hpcfutures run`` and the laptop set none themselves); it wins "
        "over ``CUDA_VISIBLE_DEVICES`` and the like, and ``none`` declares none. See "
        ":doc:`resources`.",
    ),
    "HPCFUTURES_FAKE_VERSIONS": (
        "unset",
        "A test seam, for hpcfutures' own tests of the version check: "
        "``python=3.9,cloudpickle=0.1`` makes this process report those versions instead "
        "of its own to the launch's other processes (see :ref:`own-modules`). It changes "
        "nothing else; never set it in a real run.",
    ),
    "HPCFUTURES_RANK": (
        "set by ``hpcfutures run``",
        "This copy's rank, ``0`` to ``HPCFUTURES_SIZE - 1``; its presence selects the "
        "``run`` launcher.",
    ),
    "HPCFUTURES_SIZE": (
        "set by ``hpcfutures run``",
        "How many copies ``hpcfutures run -n N`` started. Set it yourself for a launcher "
        "that does not tell its processes how many it started (the launchers that need "
        "it say so in their error message).",
    ),
    "HPCFUTURES_INSIDE_TASK_ON": (
        "set by every worker",
        "Where this worker runs (``rank 3 (worker) of launch ... on node17``): tasks run "
        "inside a launch there, and so do the processes they start, which inherit it; an "
        "executor created there raises :class:`~hpcfutures.NestedExecutorError`. A process "
        "started by a task that must run a launch of its own can remove it.",
    ),
    "HPCFUTURES_ARRAY_INDICES": (
        "unset",
        "``FIRST-LAST`` or ``FIRST-LAST:STEP``: the index range of a job array, for batch "
        "systems that do not tell an element where its array starts and ends.",
    ),
    "HPCFUTURES_LAUNCH_ID": (
        "set by ``hpcfutures run``",
        "A random id per launch, stamped into the scheduler file so that copies of two "
        "launches never meet.",
    ),
    "HPCFUTURES_RUN_TAGGED": (
        "set by ``hpcfutures run``",
        "``1``: it tags each line of this copy's output with ``[rank N role]``, and the "
        "copy tells it the role it negotiated.",
    ),
    "HPCFUTURES_RUN_TERMINAL": (
        "set by ``hpcfutures run``",
        "``1`` when the output it relays goes to a terminal: a progress bar then draws "
        "in this copy.",
    ),
}

PACKAGE = Path(__file__).resolve().parents[2] / "hpcfutures"


def _list_table(header: list[str], rows: list[list[str]], widths: str) -> list[str]:
    lines = [".. list-table::", "   :header-rows: 1", f"   :widths: {widths}", ""]
    for row in [header, *rows]:
        lines.append(f"   * - {row[0]}")
        lines.extend(f"     - {cell}" for cell in row[1:])
    return lines


class _TableDirective(SphinxDirective):
    has_content = False

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(self.lines(), source="(generated)"),
                                self.content_offset, container)
        return container.children


class OptionsTable(_TableDirective):
    """Every option of ``Executor(...)``, straight from ``hpcfutures._support.options``."""

    def lines(self) -> list[str]:
        from hpcfutures._support.options import OPTIONS

        rows = [[f"``{option.name}``", *_text_sources(option), option.kind.describe,
                 option.shown_default, option.doc]
                for option in OPTIONS]
        header = ["Keyword", "Environment variable", "Dask config", "Value", "Default", "Meaning"]
        return _list_table(header, rows, "14 20 18 16 10 30")


def _text_sources(option) -> list[str]:
    """The variable and config key of an option; for a Python object, that they are refused."""
    if option.textual:
        return [f"``{option.env_name}``", f"``{option.config_key}``"]
    return [f"``{option.env_name}``: refused (keyword argument only)",
            f"``{option.config_key}``: refused"]


class VariablesTable(_TableDirective):
    """The HPCFUTURES_* variables that are not options."""

    def lines(self) -> list[str]:
        rows = [[f"``{name}``", default, meaning]
                for name, (default, meaning) in OTHER_VARIABLES.items()]
        return _list_table(["Variable", "Default", "Meaning"], rows, "25 20 55")


class LaunchersTable(_TableDirective):
    """The built-in launcher plug-ins, in detection order, from ``hpcfutures.launchers``."""

    def lines(self) -> list[str]:
        from hpcfutures.launchers import BUILTIN, _load

        rows = []
        for name, spec in BUILTIN.items():
            try:
                cls = _load(spec)
            except (ImportError, AttributeError) as err:
                logger.warning("hpcfutures-launchers: built-in launcher %r (%s) cannot be "
                               "loaded: %s", name, spec, err)
                continue
            summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
            module, _, qualname = spec.partition(":")
            rows.append([f"``{name}``", f"``{module}.{qualname}``", summary])
        return _list_table(["Name", "Class", "Starts processes as"], rows, "12 38 50")


def check_every_variable_is_documented(app) -> None:
    """Warn about an HPCFUTURES_* name in the package that no table documents."""
    from hpcfutures._support.options import OPTIONS

    documented = {option.env_name for option in OPTIONS} | set(OTHER_VARIABLES)
    pattern = re.compile(r"\bHPCFUTURES_[A-Z0-9_]*[A-Z0-9]\b")
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in sorted(set(pattern.findall(path.read_text())) - documented):
            logger.warning("%s is used in %s but not documented: add it to OTHER_VARIABLES "
                           "in docs/_ext/hpcfutures_docs.py (or make it an option)",
                           name, path.relative_to(PACKAGE.parent))


def setup(app):
    app.add_directive("hpcfutures-options", OptionsTable)
    app.add_directive("hpcfutures-variables", VariablesTable)
    app.add_directive("hpcfutures-launchers", LaunchersTable)
    app.connect("builder-inited", check_every_variable_is_documented)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
