"""A mixin for what a ``with`` block closes: the index kinds (:class:`~intentrank.index.Index`,
:class:`~intentrank.index.postgres.PgIndex`,
:class:`~intentrank.scale.coordinator.ClusterIndex`)."""

from __future__ import annotations

from typing import Self


class Closing:
    """``with x:`` gives ``x`` and calls its :meth:`close` at the end, as for an error."""

    def close(self) -> None:
        """Release what the object holds (files, connections, processes)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
