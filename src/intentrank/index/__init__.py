"""On-disk hybrid index: build once, reopen with checked settings."""

from intentrank.index.build import build_index
from intentrank.index.settings import IndexSettings
from intentrank.index.store import Index

__all__ = ["Index", "IndexSettings", "build_index"]
