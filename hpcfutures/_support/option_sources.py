"""The source text generated from the option declarations, and the command that writes it.

Static tools (mypy, IDEs, ``help()``) need real, typed signatures, so the
option keywords of the public entry points and the fields of ``Settings`` are
plain source, written from :data:`.options.OPTIONS`::

    python -m hpcfutures._support.option_sources --write   # rewrite what is out of date
    python -m hpcfutures._support.option_sources           # only check (exit status 1)

Generated code sits between ``# BEGIN generated: NAME`` and
``# END generated: NAME`` lines (``<!-- ... -->`` in Markdown); the
docstrings' "Args" entries of the options are regenerated in place, next to
the hand-written entries of other parameters.  ``tests/test_config.py`` fails
while any of it is out of date.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from .options import BY_NAME, CONNECT_KEYWORDS, NAMES, OPTIONS, Option

__all__ = ["COMMAND", "main", "stale_files"]

COMMAND = "python -m hpcfutures._support.option_sources --write"
ROOT = Path(__file__).resolve().parents[2]
WIDTH = 96
LITERAL = re.compile(r"``.+?``")
MARKER = re.compile(
    r"^(?P<indent>[ \t]*)(?:#|<!--) BEGIN generated: (?P<name>[\w-]+)\b.*\n"
    r"(?P<body>(?:.*\n)*?)"
    r"[ \t]*(?:#|<!--) END generated: (?P=name)\b.*$",
    re.MULTILINE,
)


# ------------------------------------------------------------------- the blocks
def settings_fields(indent: str) -> list[str]:
    lines = []
    for option in OPTIONS:
        holds = option.kind.holds + (" | None" if option.optional else "")
        lines.append(f"{indent}{option.name}: {holds}")
    return lines


def parameters(names: Sequence[str]) -> Callable[[str], list[str]]:
    """Keyword parameters, each ``= None`` (not given); positional ones first, then ``*``."""

    def render(indent: str) -> list[str]:
        chosen = [BY_NAME[name] for name in names]
        positional = [option for option in chosen if option.positional]
        lines = [f"{indent}{option.name}: {option.kind.accepts} | None = None,"
                 for option in positional]
        if positional and len(positional) < len(chosen):
            lines.append(f"{indent}*,")
        lines += [f"{indent}{option.name}: {option.kind.accepts} | None = None,"
                  for option in chosen if not option.positional]
        return lines

    return render


def docstring_entry(option: Option, indent: str) -> list[str]:
    """The Google-style "Args" entry of ``option``, wrapped outside ``literals``."""
    if option.textual:
        where = f"Environment: ``{option.env_name}``."
    else:
        where = (f"Only as a keyword argument (``{option.env_name}`` is refused: a Python "
                 "object is not text).")
    text = f"{option.name}: {option.full_doc} Default: {option.shown_default}. {where}"
    text = LITERAL.sub(lambda match: match[0].replace(" ", "\0"), text)
    lines = textwrap.wrap(text, WIDTH, initial_indent=indent,
                          subsequent_indent=indent + "    ",
                          break_on_hyphens=False, break_long_words=False)
    return [line.replace("\0", " ") for line in lines]


@dataclasses.dataclass(frozen=True)
class Target:
    """A file with generated blocks, and the docstrings whose option entries are generated."""

    path: str
    blocks: dict[str, Callable[[str], list[str]]]
    #: Top-level class or function -> the options its docstring's "Args" documents.
    docstrings: dict[str, Sequence[str]] = dataclasses.field(default_factory=dict)


TARGETS = (
    Target("hpcfutures/_support/config.py", {"settings": settings_fields}),
    Target("hpcfutures/_facade/executor.py", {"executor": parameters(NAMES)},
           {"Executor": NAMES}),
    Target("hpcfutures/_facade/outside/connect.py", {"connect": parameters(CONNECT_KEYWORDS)},
           {"connect": CONNECT_KEYWORDS}),
)


# ------------------------------------------------------------------ rewriting
def _fill_blocks(text: str, blocks: dict[str, Callable[[str], list[str]]], where: str) -> str:
    found: set[str] = set()

    def replace(match: re.Match) -> str:
        name = match["name"]
        if name not in blocks:
            raise LookupError(f"{where}: no generator for the block {name!r}")
        found.add(name)
        begin, _, rest = match[0].partition("\n")
        end = rest[len(match["body"]):]
        body = "".join(line + "\n" for line in blocks[name](match["indent"]))
        return f"{begin}\n{body}{end}"

    text = MARKER.sub(replace, text)
    missing = set(blocks) - found
    if missing:
        raise LookupError(f"{where}: the BEGIN/END generated markers of "
                          f"{', '.join(sorted(missing))} are missing")
    return text


def _docstring_lines(text: str, owner: str, where: str) -> tuple[int, int]:
    """First and last line (0-based) of the docstring of top-level ``owner``."""
    for node in ast.parse(text).body:
        if (isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == owner
                and ast.get_docstring(node) is not None):
            doc = node.body[0]
            return doc.lineno - 1, (doc.end_lineno or doc.lineno) - 1
    raise LookupError(f"{where}: no docstring of {owner!r}")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _fill_args(lines: list[str], first: int, last: int, names: Sequence[str],
               where: str) -> list[str]:
    """``lines`` with the option entries of the "Args" section between first..last redone."""
    start = next((i for i in range(first, last + 1) if lines[i].strip() == "Args:"), None)
    if start is None:
        raise LookupError(f"{where}: the docstring has no 'Args:' section")
    entry_indent = _indent(lines[start]) + 4
    end = start + 1
    while end <= last and (not lines[end].strip() or _indent(lines[end]) >= entry_indent):
        end += 1
    while not lines[end - 1].strip():
        end -= 1
    entries: list[list[str]] = []
    for line in lines[start + 1:end]:
        if (line.strip() and _indent(line) == entry_indent) or not entries:
            entries.append([line])
        else:
            entries[-1].append(line)
    pad = " " * entry_indent
    generated = [line for name in names for line in docstring_entry(BY_NAME[name], pad)]
    kept: list[str] = []
    placed = False
    for entry in entries:
        params = {p.strip() for p in entry[0].split(":", 1)[0].split(",")}
        if params & set(names):
            if not placed:
                kept += generated
                placed = True
        else:
            kept += entry
    if not placed:
        kept += generated
    return lines[:start + 1] + kept + lines[end:]


def regenerate(target: Target, text: str) -> str:
    """``text`` (the file's contents) with everything generated brought up to date."""
    text = _fill_blocks(text, target.blocks, target.path)
    for owner, names in target.docstrings.items():
        lines = text.split("\n")
        first, last = _docstring_lines(text, owner, target.path)
        text = "\n".join(_fill_args(lines, first, last, names, f"{target.path}: {owner}"))
    return text


def stale_files(write: bool = False, root: Path = ROOT) -> list[str]:
    """The files whose generated parts are out of date (rewritten if ``write``)."""
    stale = []
    for target in TARGETS:
        path = root / target.path
        if not path.exists():  # an installed package has no README
            continue
        old = path.read_text()
        new = regenerate(target, old)
        if new != old:
            stale.append(target.path)
            if write:
                path.write_text(new)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hpcfutures._support.option_sources",
        description="Write (or check) the source generated from the option declarations "
                    "in hpcfutures/_support/options.py.")
    parser.add_argument("--write", action="store_true",
                        help="rewrite the out-of-date files (default: only check)")
    args = parser.parse_args(argv)
    stale = stale_files(write=args.write)
    for path in stale:
        print(f"{'rewrote' if args.write else 'out of date:'} {path}")
    if stale and not args.write:
        print(f"run: {COMMAND}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
