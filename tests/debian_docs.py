"""Where the tests find real documents that Debian packages ship (PDF, HTML, Markdown):
unpacked by scripts/debian_docs.sh (run by scripts/setup.sh) into .cache/debian-docs, or
installed in /usr/share/doc. A test that needs one that is absent skips, naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLACES = (ROOT / ".cache" / "debian-docs" / "root", Path("/"))


def debian_doc(relative: str) -> Path:
    """``usr/share/doc/...`` (or ``usr/share/gtk-doc/...``) from the unpacked packages or
    the system; skips the test when neither has it."""
    for place in PLACES:
        path = place / relative
        if path.exists():
            return path
    pytest.skip(f"{relative} is absent: run scripts/debian_docs.sh (needs apt-get)")
