"""Reading a folder (or one file) of documents into passages: the walk, the include and
exclude globs, one parser per format, chunking, stable ids, and the files skipped with
their reasons."""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from intentrank.data.ingest.blocks import Extracted, SkipFile
from intentrank.data.ingest.chunking import ChunkSettings, chunk_blocks
from intentrank.data.ingest.docx import parse_docx
from intentrank.data.ingest.globs import glob_regex, matches
from intentrank.data.ingest.html import parse_html
from intentrank.data.ingest.markdown import parse_markdown
from intentrank.data.ingest.pdf import parse_pdf
from intentrank.data.ingest.text import parse_text
from intentrank.errors import DataError
from intentrank.types import Document

PARSERS: dict[str, Callable[[bytes], Extracted]] = {
    ".md": parse_markdown, ".markdown": parse_markdown, ".txt": parse_text,
    ".html": parse_html, ".htm": parse_html, ".pdf": parse_pdf, ".docx": parse_docx}
DEFAULT_INCLUDE = tuple(f"*{ext}" for ext in PARSERS)
DEFAULT_EXCLUDE: tuple[str, ...] = ()
HIDDEN = (".*", "**/.*/**")  # hidden files and folders (.git, .cache, ...): read_folder(hidden=)
MAX_BYTES = 64 << 20
_UNSAFE = re.compile(r"[%\s]")


def doc_id(rel: str, n: int | None = None) -> str:
    """The id of a file (``n`` None: the parent id) or of its ``n``-th passage:
    ``<relative path>#<n>``, whitespace and '%' percent-encoded (ids hold no whitespace)."""
    base = _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), rel)
    return base if n is None else f"{base}#{n}"


@dataclass(frozen=True)
class Skipped:
    """A file not read, and why (``kind``: the reason without its details)."""

    path: str
    reason: str

    @property
    def kind(self) -> str:
        return re.split(r" \(|: ", self.reason, maxsplit=1)[0]


@dataclass
class FolderRead:
    """What :func:`read_folder` found. ``documents`` is lazy: files are read as it is
    iterated, and ``read``, ``skipped`` and :meth:`summary` are complete once it is
    exhausted. ``files``: every file selected (relative paths, in reading order);
    ``read``: relative path -> sha256 of each file read; ``ignored``: files left out by
    the globs."""

    root: Path
    files: list[str]
    documents: Iterator[Document] = field(repr=False, default_factory=lambda: iter(()))
    read: dict[str, str] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    passages: int = 0
    ignored: int = 0

    def summary(self) -> str:
        """One line: files read, passages, files skipped by kind of reason."""
        line = f"{len(self.read)} file(s) read, {self.passages} passage(s)"
        if self.skipped:
            kinds = Counter(s.kind for s in self.skipped)
            line += f"; {len(self.skipped)} skipped (" + ", ".join(
                f"{k}: {n}" for k, n in sorted(kinds.items())) + ")"
        if self.ignored:
            line += f"; {self.ignored} not selected by the globs"
        return line


def list_files(root: str | Path, include: Sequence[str] = DEFAULT_INCLUDE,
               exclude: Sequence[str] = DEFAULT_EXCLUDE, hidden: bool = False) -> list[str]:
    """The relative paths :func:`read_folder` would read under the folder ``root``, without
    reading them (e.g. to find the files a sync removes)."""
    return _walk(Path(root), include, (*exclude, *(() if hidden else HIDDEN)))[0]


def _walk(root: Path, include: Sequence[str], exclude: Sequence[str]) -> tuple[list[str], int]:
    """Relative paths under ``root`` matching ``include`` and not ``exclude`` (sorted; a
    folder that ``exclude`` matches is not entered), and how many other files there were."""
    for p in (*include, *exclude):
        glob_regex(p)  # bad patterns fail before the walk
    found, ignored = [], 0
    for folder, dirs, names in os.walk(root):
        rel_dir = Path(folder).relative_to(root).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        dirs[:] = sorted(d for d in dirs if not matches(prefix + d + "/", exclude))
        for name in sorted(names):
            rel = prefix + name
            if matches(rel, include) and not matches(rel, exclude):
                found.append(rel)
            else:
                ignored += 1
    return found, ignored


def _extract(path: Path, max_bytes: int) -> tuple[Extracted, str, os.stat_result]:
    suffix = path.suffix.lower()
    parse = PARSERS.get(suffix)
    if parse is None:
        raise SkipFile(f"unsupported format ({suffix or 'no extension'}; reads "
                       f"{', '.join(PARSERS)})")
    try:
        stat = path.stat()
        if stat.st_size == 0:
            raise SkipFile("empty file")
        if stat.st_size > max_bytes:
            raise SkipFile(f"too large ({stat.st_size} bytes; the limit is {max_bytes})")
        data = path.read_bytes()
    except OSError as exc:
        raise SkipFile(f"unreadable ({exc.strerror or exc})") from None
    extracted = parse(data)
    if not any(b.text.strip() for b in extracted.blocks):
        raise SkipFile("no text")
    return extracted, hashlib.sha256(data).hexdigest(), stat


def document_title(extracted: Extracted, rel: str) -> str:
    """The title every passage of a file carries: the document's own (metadata, ``<title>``,
    front matter, a PDF's title page, a DOCX's Title paragraph), else its first heading
    when no later heading is at its level or above (one H1 over its sections, not the first
    of several chapters), else the file's name without its extension. The heading path
    stays each passage's section (``headings``)."""
    if extracted.title:
        return extracted.title
    heads = [b for b in extracted.blocks if b.kind == "heading"]
    if heads and not any(h.level <= heads[0].level for h in heads[1:]):
        return heads[0].text
    return Path(rel).stem


def read_file(path: str | Path, rel: str, chunking: ChunkSettings | None = None,
              max_bytes: int = MAX_BYTES) -> tuple[list[Document], str]:
    """The passages of one file (``rel``: its path relative to the folder, '/'-separated)
    and the file's sha256; raises :class:`SkipFile` when it cannot be read."""
    extracted, digest, stat = _extract(Path(path), max_bytes)
    _, chunks = chunk_blocks(extracted.blocks, chunking)
    title = document_title(extracted, rel)
    mtime = datetime.fromtimestamp(stat.st_mtime, UTC).isoformat(timespec="seconds")
    docs = []
    for n, c in enumerate(chunks):
        meta: dict[str, Any] = {**extracted.metadata, "path": rel, "mtime": mtime,
                                "title": title, "headings": list(c.headings),
                                "char_start": c.char_start, "char_end": c.char_end,
                                "content_sha256": digest}
        if c.page is not None:
            meta["page"] = c.page
            if c.page_end != c.page:
                meta["page_end"] = c.page_end
        docs.append(Document(id=doc_id(rel, n), text=c.text, title=title,
                             parent_id=doc_id(rel), metadata=meta))
    return docs, digest


def read_folder(root: str | Path, include: Sequence[str] = DEFAULT_INCLUDE,
                exclude: Sequence[str] = DEFAULT_EXCLUDE,
                chunking: ChunkSettings | None = None, strict: bool = False,
                max_bytes: int = MAX_BYTES, progress: bool = False, hidden: bool = False
                ) -> FolderRead:
    """The passages of every document under ``root`` (recursively; see ``globs.py`` for
    the patterns; hidden files and folders are left out unless ``hidden``), or of ``root``
    itself when it is a file (paths then relative to its folder). Ids are
    ``<relative path>#<n>`` (:func:`doc_id`), the parent id the relative path: an unchanged
    file gives identical documents. A file that cannot be read is skipped with its reason
    (``FolderRead.skipped``), or raises a DataError naming it with ``strict=True``."""
    root = Path(root)
    if root.is_file():
        files, ignored, base = [root.name], 0, root.parent
    elif root.is_dir():
        files, ignored = _walk(root, include, (*exclude, *(() if hidden else HIDDEN)))
        base = root
    else:
        raise DataError("no such file or folder", root)
    result = FolderRead(root=base, files=files, ignored=ignored)
    result.documents = _documents(result, chunking or ChunkSettings(), strict, max_bytes,
                                  progress)
    return result


def _documents(result: FolderRead, chunking: ChunkSettings, strict: bool, max_bytes: int,
               progress: bool) -> Iterator[Document]:
    files: Any = result.files
    if progress:
        from tqdm import tqdm

        files = tqdm(files, desc="reading", unit="file")
    for rel in files:
        try:
            docs, digest = read_file(result.root / rel, rel, chunking, max_bytes)
        except SkipFile as exc:
            if strict:
                raise DataError(f"cannot read: {exc.reason}", result.root / rel) from None
            result.skipped.append(Skipped(rel, exc.reason))
            continue
        result.read[rel] = digest
        result.passages += len(docs)
        yield from docs
