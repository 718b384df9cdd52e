"""Grounded answers: generate an answer from a ranking's top documents with numbered
citations (``answer`` stage), and read and validate those citations."""

from intentrank.core.registry import import_submodules

import_submodules(__name__, __path__)
