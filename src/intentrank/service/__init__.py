"""The HTTP service (``intentrank serve``): a FastAPI app over indexes and named pipelines
loaded once at start-up, API keys, request limits, a bounded worker pool, JSON-lines access
logs and a small web page. See docs/service.md."""

from __future__ import annotations

from intentrank.service.settings import Limits, ServiceSettings

__all__ = ["Limits", "ServiceSettings", "create_app"]


def create_app(settings: ServiceSettings):  # noqa: ANN201 (a fastapi.FastAPI)
    """The FastAPI app for ``settings`` (imports FastAPI only when called)."""
    from intentrank.service.app import create_app as _create

    return _create(settings)
