"""Reading folders of real documents (Markdown, text, HTML, PDF, DOCX) into passages with
their source, headings, pages and offsets: :func:`read_folder`; how a passage is cited:
:func:`source_label`. docs/ingestion.md says which parser reads each format and why."""

from intentrank.data.ingest.blocks import Block, Extracted, SkipFile
from intentrank.data.ingest.chunking import Chunk, ChunkSettings, chunk_blocks
from intentrank.data.ingest.folder import (
    DEFAULT_EXCLUDE,
    DEFAULT_INCLUDE,
    PARSERS,
    FolderRead,
    Skipped,
    doc_id,
    list_files,
    read_file,
    read_folder,
)
from intentrank.data.ingest.labels import source_label

__all__ = ["DEFAULT_EXCLUDE", "DEFAULT_INCLUDE", "PARSERS", "Block", "Chunk", "ChunkSettings",
           "Extracted", "FolderRead", "SkipFile", "Skipped", "chunk_blocks", "doc_id",
           "list_files", "read_file", "read_folder", "source_label"]
