"""Sphinx extension: the configuration reference, generated from the code.

``.. hpcfutures-options::`` renders one row per option declared in
``hpcfutures._support.options.OPTIONS`` (keyword, ``HPCFUTURES_*`` variable, Dask
config key, accepted values, default, meaning), so the table cannot drift
from what :func:`hpcfutures._support.config.resolve_settings` reads.

``.. hpcfutures-variables::`` renders the other ``HPCFUTURES_*`` variables,
which are listed in ``hpcfutures._support.variables.OTHER_VARIABLES``.  At build time every
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

from hpcfutures._support.variables import OTHER_VARIABLES

logger = logging.getLogger(__name__)

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
                           "in hpcfutures/_support/variables.py (or make it an option)",
                           name, path.relative_to(PACKAGE.parent))


def setup(app):
    app.add_directive("hpcfutures-options", OptionsTable)
    app.add_directive("hpcfutures-variables", VariablesTable)
    app.add_directive("hpcfutures-launchers", LaunchersTable)
    app.connect("builder-inited", check_every_variable_is_documented)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
