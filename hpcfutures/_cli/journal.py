"""``hpcfutures journal DIR``: what a result journal holds; ``--clear`` empties it."""

from __future__ import annotations

import sys
from pathlib import Path

from .._support.journal_files import clear_journal, journal_stats

__all__ = ["journal_command"]


def journal_command(directory: str, clear: bool = False) -> int:
    """Print the journal's calls, size and functions (or clear it); the exit status."""
    path = Path(directory).expanduser()
    if not path.is_dir():
        print(f"hpcfutures journal: {path} is not a directory (no journal there)",
              file=sys.stderr)
        return 1
    if clear:
        try:
            removed = clear_journal(path)
        except OSError as err:
            print(f"hpcfutures journal: cannot clear {path}: {err}", file=sys.stderr)
            return 1
        print(f"journal {path}: cleared ({removed} segment file(s) removed); "
              "every call runs again")
        return 0
    stats = journal_stats(path)
    print(f"journal {path}")
    print(f"  calls:     {stats.calls} recorded ({stats.records} results, repeats included, "
          f"in {stats.segments} segment file(s))")
    print(f"  size:      {_size(stats.size)}")
    for where, offset in stats.damaged:
        print(f"  damaged:   {where.name} from byte {offset} (a write interrupted by a "
              "kill): those calls run again")
    if stats.functions:
        print("  functions:")
        width = max(len(str(count)) for count in stats.functions.values())
        for name, count in sorted(stats.functions.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"    {count:>{width}}  {name}")
    return 0


def _size(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} bytes"  # pragma: no cover
