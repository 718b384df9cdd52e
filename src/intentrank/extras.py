"""Optional dependencies, installed as extras: a missing one names the extra to install."""

from __future__ import annotations

import contextlib
import importlib
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

from intentrank.errors import IntentrankError


class MissingExtraError(IntentrankError):
    """An optional dependency is not installed; the message names the extra."""


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{purpose} needs {module.split('.')[0]!r}, which is not installed: "
            f"pip install 'intentrank[{extra}]' (or 'intentrank[all]')") from exc


def package_versions(packages: tuple[str, ...]) -> dict[str, str]:
    """Installed versions of those ``packages`` that are installed (recorded in manifests)."""
    out = {}
    for pkg in packages:
        with contextlib.suppress(PackageNotFoundError):
            out[pkg] = version(pkg)
    return out
