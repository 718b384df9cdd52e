"""Metadata filters: a small grammar (``source = "handbook" AND year >= 2020 AND NOT team IN
("a", "b") OR path PREFIX "docs/"``), its syntax tree, and evaluation on one record
(:meth:`Filter.matches`) or on every row of an index at once (:meth:`Filter.mask` over
:class:`MetadataColumns`). docs/filters.md gives the grammar and its semantics.

- ``values``: value kinds, how a record's elements compare, field look-up, text forms;
- ``columns``: :class:`MetadataColumns`, typed per-field arrays over all rows;
- ``tree``: the nodes (:class:`Compare`, :class:`In`, :class:`Prefix`, :class:`And`,
  :class:`Or`, :class:`Not`), :func:`and_filters` and :func:`parse_filter`.
"""

from intentrank.filters.columns import MetadataColumns
from intentrank.filters.tree import (
    And,
    Compare,
    Filter,
    In,
    Not,
    Or,
    Prefix,
    and_filters,
    parse_filter,
)

__all__ = ["And", "Compare", "Filter", "In", "MetadataColumns", "Not", "Or", "Prefix",
           "and_filters", "parse_filter"]
