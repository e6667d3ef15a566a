"""The house rules (issue 31): small modules, and no circles between them.

A module past :data:`MOST_LINES` lines holds more than one idea, and two modules
that import each other (even lazily, inside a function, to dodge Python's
import-time circle) are one idea split in the wrong place.  Both are read from
the source, so a new module is checked the day it is added.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT, package_modules

#: The most lines a module of the package may have.
MOST_LINES = 800


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its source."""
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    wanted: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            wanted.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # `from . import x` names a module
                module = f"{target}.{alias.name}"
                wanted.add(module if module in modules else target)
    return {module for module in wanted if module in modules and module != name}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other (Tarjan's strongly connected parts)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(graph[module]):
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return groups


def test_no_module_is_longer_than_800_lines():
    long = {name: len(path.read_text().splitlines()) for name, path in package_modules().items()}
    assert {name: n for name, n in long.items() if n > MOST_LINES} == {}


def test_no_two_modules_import_each_other_even_lazily():
    modules = package_modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _circles(graph) == []


def test_the_circle_check_sees_a_lazy_circle(tmp_path):
    """The check itself: a function-level import back is a circle."""
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import g\n")
    modules = {"pkg.a": tmp_path / "a.py", "pkg.b": tmp_path / "b.py"}
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _circles(graph) == [["pkg.a", "pkg.b"]]


def test_the_strict_type_checking_list_names_real_modules():
    """pyproject.toml's mypy overrides name modules that exist: a module that moved
    silently left the strict list (``_facade.connect`` did).  Read with a pattern,
    not tomllib, which Python 3.10 (the floor) lacks."""
    import re

    text = (ROOT / "pyproject.toml").read_text()
    named = re.findall(r'^\s*"(hpcfutures[\w.*]*)",', text, flags=re.MULTILINE)
    assert "hpcfutures._dask.*" in named
    modules = package_modules()
    missing = [name for name in named if name.removesuffix(".*") not in modules]
    assert missing == [], "pyproject.toml's mypy overrides name modules that do not exist"


def test_the_error_tree_in_errors_py_names_every_public_error():
    """The drawing at the top of ``_errors.py`` is the users' map of what to catch."""
    import hpcfutures
    from hpcfutures import _errors

    drawn = _errors.__doc__ or ""
    public = [name for name in hpcfutures.__all__
              if isinstance(getattr(hpcfutures, name), type)
              and issubclass(getattr(hpcfutures, name), hpcfutures.HPCFuturesError)]
    assert len(public) > 10
    assert [name for name in public if name not in drawn] == []
