"""The documentation builds with warnings as errors, and its snippets match the real API.

The build needs sphinx and furo (the ``docs`` extra): without them the build
test skips on a laptop and fails under CI=true.  The snippet checks need
nothing but hpcfutures: every Python block in docs/*.rst must compile, every
``hpcfutures.<name>`` and ``from hpcfutures... import <name>`` must exist,
keyword arguments of the executors must be real parameters, every
``hpcfutures run``/``info`` command line must parse with the real CLI, and
every ``HPCFUTURES_*`` variable the docs name must be one the code reads.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import shlex
import subprocess
import sys
import textwrap

import pytest
from helpers import ROOT, package_modules, require

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.rst"))
#: A code-block directive, also inside a list-table cell ("   * - .. code-block:: python").
DIRECTIVE = re.compile(r"^(?P<indent>[\s*-]*)\.\. code-block:: (?P<language>\w+)\s*$")


def have_sphinx() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("sphinx", "furo"))


@pytest.mark.timeout(600)
def test_docs_build_with_warnings_as_errors(tmp_path):
    require(have_sphinx(), "sphinx and furo (python -m pip install -e '.[docs]')")
    # -n: nitpicky, every cross-reference (:class:, :mod:, :doc:, ...) must resolve.
    command = [sys.executable, "-m", "sphinx", "-n", "-W", "--keep-going", "-q", "-b", "html",
               "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=540, cwd=ROOT)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"

    from hpcfutures._support.options import OPTIONS

    reference = (tmp_path / "html" / "configuration.html").read_text()
    for option in OPTIONS:  # the generated table is there and complete
        assert option.env_name in reference, option.name
        assert option.config_key in reference, option.name


# ------------------------------------------------------------------ snippets
def code_blocks(language: str):
    """(page, line, text) of every ``.. code-block:: language`` in the docs."""
    for page in PAGES:
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            match = DIRECTIVE.match(line)
            if not match or match["language"] != language:
                continue
            indent, body = len(match["indent"]), []
            for following in lines[number + 1:]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                body.append(following)
            text = textwrap.dedent("\n".join(body))
            text = "\n".join(row for row in text.splitlines()
                             if not row.lstrip().startswith(":"))
            yield page.name, number + 1, textwrap.dedent(text).strip("\n")


PYTHON_BLOCKS = list(code_blocks("python"))
CONSOLE_BLOCKS = list(code_blocks("console"))


def test_the_docs_have_snippets_to_check():
    assert len(PYTHON_BLOCKS) > 10 and len(CONSOLE_BLOCKS) > 10


def _executor_classes():
    import hpcfutures

    return {name: getattr(hpcfutures, name) for name in
            ("Executor", "LocalExecutor", "MPIExecutor", "SlurmExecutor")}


@pytest.mark.parametrize("page, line, code", PYTHON_BLOCKS,
                         ids=[f"{page}:{line}" for page, line, _ in PYTHON_BLOCKS])
def test_python_snippet_matches_the_api(page, line, code):
    import hpcfutures

    tree = ast.parse(code, filename=f"{page}:{line}")  # a SyntaxError fails the test
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "hpcfutures"):
            assert hasattr(hpcfutures, node.attr), f"hpcfutures.{node.attr} does not exist"
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hpcfutures"):
            if node.module == "hpcfutures.cubed" and sys.version_info < (3, 11):
                # Cubed (3.11 and later) is not installed: read the module's names instead
                names = _top_level_names(ROOT / "hpcfutures" / "cubed.py")
                for alias in node.names:
                    assert alias.name in names, f"{node.module}.{alias.name} does not exist"
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module}.{alias.name} does not exist"
        if isinstance(node, ast.Call):
            func = node.func
            name = (func.attr if isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name) and func.value.id == "hpcfutures"
                    else None)
            cls = _executor_classes().get(name)
            if cls is None:
                continue
            parameters = inspect.signature(cls).parameters
            for keyword in node.keywords:
                assert keyword.arg in parameters, f"{name}() has no option {keyword.arg!r}"


def _top_level_names(path) -> set[str]:
    """The classes, functions and assigned names a module defines at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


def _cli_commands():
    """Every ``hpcfutures ...`` command line in the console blocks, as argument lists."""
    for page, line, text in CONSOLE_BLOCKS:
        joined = re.sub(r"\\\n\s*>?\s*", " ", text)
        for command in joined.splitlines():
            command = command.strip().removeprefix("$").split(" #")[0].strip()
            match = re.search(r"(?:^|\s)(?:python -m )?hpcfutures\s+(run|info)\b(.*)$", command)
            if match and not command.startswith(">"):
                words = shlex.split(match[1] + match[2])
                yield page, line, words


CLI_COMMANDS = list(_cli_commands())


@pytest.mark.parametrize("page, line, words", CLI_COMMANDS,
                         ids=[f"{page}:{line}:{' '.join(w)[:30]}"
                              for page, line, w in CLI_COMMANDS])
def test_cli_snippet_parses(page, line, words):
    from hpcfutures._cli import _parser

    try:
        _parser().parse_args(words)
    except SystemExit:
        pytest.fail(f"{page}:{line}: 'hpcfutures {' '.join(words)}' is not a valid command")


def test_every_documented_variable_exists():
    from hpcfutures._support.options import OPTIONS

    real = {option.env_name for option in OPTIONS}
    for source in package_modules().values():
        real |= set(re.findall(r"\bHPCFUTURES_[A-Z0-9_]*[A-Z0-9]\b", source.read_text()))
    # The contributors' page may also name what the test suite itself reads.
    harness = set()
    for source in (ROOT / "tests").rglob("*.py"):
        harness |= set(re.findall(r"\bHPCFUTURES_TEST_[A-Z0-9_]*[A-Z0-9]\b", source.read_text()))
    for page in PAGES:
        known = real | harness if page.name == "contributing.rst" else real
        for name in set(re.findall(r"\bHPCFUTURES_[A-Z0-9_]*[A-Z0-9]\b", page.read_text())):
            assert name in known, f"{page.name} documents {name}, which hpcfutures never reads"


def test_the_architecture_page_names_every_module_of_the_package():
    """docs/architecture.rst is the map of the package: a module it does not name is lost."""
    page = (ROOT / "docs" / "architecture.rst").read_text()
    package = ROOT / "hpcfutures"
    missing = sorted(
        str(path.relative_to(package))
        for path in package_modules().values()
        if path.name not in ("__init__.py", "__main__.py") and path.name not in page)
    assert not missing, f"docs/architecture.rst does not name {missing}"
    for folder in sorted(p for p in package.iterdir() if (p / "__init__.py").exists()):
        assert f"{folder.name}/" in page, f"docs/architecture.rst does not show {folder.name}/"
    readme = (ROOT / "README.md").read_text()
    for folder in sorted(p for p in package.iterdir() if (p / "__init__.py").exists()):
        assert f"{folder.name}/" in readme, f"README's layout does not show {folder.name}/"


def test_the_seam_registry_counts_its_rows_and_names_tests_that_exist():
    """The registry of Dask seams ("Where hpcfutures touches Dask's internals") says how
    many rows it has, of which class, and names the test that pins each: the count must be
    the table's, and every test it names (in the table and the paragraphs after it) must
    exist, so that a seam's test cannot be renamed or removed and leave its row pointing
    nowhere."""
    page = (ROOT / "docs" / "architecture.rst").read_text()
    section = page.split("Where hpcfutures touches Dask's internals", 1)[1]
    table, after = section.split("The table has ", 1)
    rows = table.split("\n   * - ")[2:]  # the first row is the header
    classes = [row.split("\n     - ", 2)[1].strip() for row in rows]
    said = re.match(r"(\d+) rows: (\d+) correctness, (\d+) scale and (\d+) latency seams", after)
    assert said, after[:200]
    assert [int(n) for n in said.groups()] == [
        len(rows), classes.count("correctness"), classes.count("scale"),
        classes.count("latency")], classes
    named = set(re.findall(r"``(test_\w+)``", table + after.split("\n\n\n", 1)[0]))
    defined = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        defined |= set(re.findall(r"^def (test_\w+)", path.read_text(), re.MULTILINE))
    assert named, "the registry names no test"
    assert not named - defined, f"the registry names tests that do not exist: {named - defined}"


# ------------------------------------------------------------ names of modules
PACKAGE = ROOT / "hpcfutures"
DOTTED = re.compile(r"(?<![\w./-])hpcfutures(?:\.[A-Za-z_]\w*)+")
#: ``_dask/spans.py``, ``hpcfutures/_facade/core/futures.py``, ``launchers/run.py``
PATH = re.compile(r"(?<![\w./-])((?:hpcfutures/)?(?:_?[a-z]\w*/)+_?[a-z]\w*\.py)\b")
OUTSIDE = {"tests", "benchmarks", "examples", "docs", "ci"}


def _texts():
    """(where, text) of the README, every docs page and every module of the package."""
    yield "README.md", (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").glob("*.rst")):
        yield f"docs/{page.name}", page.read_text()
    for source in package_modules().values():
        yield str(source.relative_to(ROOT)), source.read_text()


def _dotted_exists(name: str) -> bool:
    """Whether ``hpcfutures.a.b.c`` is a module of the package, or a name defined in one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.with_suffix(".py").exists() else \
            base / "__init__.py"
        if module.exists():
            rest = parts[cut:]
            return not rest or re.search(rf"\b{re.escape(rest[0])}\b", module.read_text()) \
                is not None
    return False


def test_every_module_a_page_or_docstring_names_exists():
    """A page, the README or a docstring that names a module of hpcfutures (dotted, or as
    a path) names one that exists: modules move, and their mentions rotted (a docstring
    pointed to ``_session``, the strict-typing list to ``_facade.connect``)."""
    missing = []
    for where, text in _texts():
        for name in set(DOTTED.findall(text)):
            if not _dotted_exists(name.rstrip(".")):
                missing.append(f"{where}: {name}")
        for path in set(PATH.findall(text)):
            relative = path.removeprefix("hpcfutures/")
            top = relative.split("/")[0]
            if top in OUTSIDE:
                exists = (ROOT / relative).exists()
            elif top in {folder.name for folder in PACKAGE.rglob("*") if folder.is_dir()}:
                exists = any(PACKAGE.rglob(relative))  # _dask/spans.py, core/futures.py
            else:
                continue  # another project's file (tornado/iostream.py)
            if not exists:
                missing.append(f"{where}: {path}")
    assert missing == [], "\n".join(sorted(missing))


def test_the_readme_is_a_front_door_and_no_page_tells_the_history_of_the_work():
    """At most 250 lines of README; no issue numbers in the README, the docs, the package
    or benchmarks/README.md (users have no tracker to look them up in)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    numbered = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
    found = [f"{where}: {match}" for where, text in
             [*_texts(), ("benchmarks/README.md", (ROOT / "benchmarks" / "README.md").read_text())]
             for match in numbered.findall(text)]
    assert found == []
    # The history of the work belongs in benchmarks/README.md and the commit messages.
    history = re.compile(r"\(was: |\bseen (?:in|once)\b|\b\d+ (?:runs )?in \d+ (?:of )?(?:the )?"
                         r"runs\b|\bpy-spy\b|\bthis session\b|\bcause not found\b")
    told = [f"{where}: {match}" for where, text in _texts() for match in history.findall(text)]
    assert told == []
