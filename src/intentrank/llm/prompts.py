"""Prompts live as data files in ``intentrank/prompts/<name>.txt`` with ``{field}`` slots."""

from __future__ import annotations

from functools import cache
from importlib import resources

from intentrank.errors import ConfigError


@cache
def load_prompt(name: str) -> str:
    """The text of a shipped prompt template."""
    try:
        return resources.files("intentrank").joinpath("prompts", f"{name}.txt").read_text("utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"no prompt template named {name!r} in intentrank/prompts") from exc


def render(template: str, **fields: object) -> str:
    """Fill ``{field}`` slots; literal braces elsewhere (JSON examples) are left alone."""
    out = template
    for key, value in fields.items():
        out = out.replace("{" + key + "}", str(value))
    return out
