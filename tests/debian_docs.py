"""Where the tests find real documents no one here wrote, which scripts/debian_docs.sh (run
by scripts/setup.sh) puts into .cache/debian-docs: the PDF, HTML and Markdown documentation
Debian packages ship (also looked for in /usr/share/doc, where a package is installed), and
the Word documents of python-docx's own tests. A test that needs one that is absent skips,
naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "debian-docs"
PLACES = (CACHE / "root", Path("/"))


def debian_doc(relative: str) -> Path:
    """``usr/share/doc/...`` (or ``usr/share/gtk-doc/...``) from the unpacked packages or
    the system; skips the test when neither has it."""
    for place in PLACES:
        path = place / relative
        if path.exists():
            return path
    pytest.skip(f"{relative} is absent: run scripts/debian_docs.sh (needs apt-get)")


def python_docx_files() -> Path:
    """The folder of python-docx's test documents (from its sdist); skips when absent."""
    folder = CACHE / "python-docx"
    if not (folder / "par-known-styles.docx").exists():
        pytest.skip(f"{folder} is absent: run scripts/debian_docs.sh (needs pip and PyPI)")
    return folder
