"""The self-contained HTML experiment reports a service lists and serves, by file name from
the configured directories (never a path from the request)."""

from __future__ import annotations

from pathlib import Path


def list_reports(dirs: list[Path]) -> dict[str, Path]:
    """File name -> path of every ``*.html`` directly inside ``dirs`` (the first directory
    wins a name twice)."""
    found: dict[str, Path] = {}
    for directory in dirs:
        if not Path(directory).is_dir():
            continue
        for path in sorted(Path(directory).glob("*.html")):
            if path.is_file() and not path.is_symlink():
                found.setdefault(path.name, path)
    return found
