"""Question categorisations as data: users, question properties and two-document types.

A categorisation file (YAML; the shipped default is ``default_categories.yaml``) names
categorisations, each a set of categories with a ``probability`` and a ``description``; one
category per categorisation is sampled for every question. :func:`load_taxonomy` validates a
file and raises a :class:`~intentrank.errors.ConfigError` naming the file and the field. A
category may also ask for ``checks`` (``distant_wording``) and bound its question's length,
``words: [min, max]`` (the ``length`` filter; see :func:`.filters.wrong_length`).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from intentrank.errors import ConfigError

DEFAULT_FILE = "default_categories.yaml"
# Taxonomies shipped with the package, by the name ``--config`` accepts instead of a path.
SHIPPED = {"default": DEFAULT_FILE, "search-queries": "search_queries.yaml"}
TOP_FIELDS = {"users", "question", "two_document", "two_document_categorisations"}
CATEGORY_FIELDS = {"probability", "description", "checks", "words"}
CHECKS = {"distant_wording"}  # filters a category may ask for
SUM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Category:
    """One category: its name, what the prompt says of it, how likely it is, the filters a
    question of this category must pass (e.g. ``distant_wording``) and, if set, the
    ``(min, max)`` words its question must have (the ``length`` filter)."""

    name: str
    description: str
    probability: float
    checks: tuple[str, ...] = ()
    words: tuple[int, int] | None = None


@dataclass(frozen=True)
class Categorisation:
    """Mutually exclusive categories; :meth:`sample` picks one by probability."""

    name: str
    categories: tuple[Category, ...]

    def sample(self, rng: random.Random) -> Category:
        return rng.choices(self.categories, weights=[c.probability for c in self.categories])[0]

    def __getitem__(self, name: str) -> Category:
        """The category called ``name`` (KeyError if there is none)."""
        for c in self.categories:
            if c.name == name:
                return c
        raise KeyError(f"{self.name}: no category {name!r}")


@dataclass(frozen=True)
class Taxonomy:
    """Users, single-document question categorisations, two-document types, and which
    question categorisations two-document questions also sample."""

    users: Categorisation
    question: tuple[Categorisation, ...]
    two_document: Categorisation
    two_document_categorisations: tuple[str, ...]
    source: str
    sha256: str

    def __getitem__(self, name: str) -> Categorisation:
        """A question categorisation by name (KeyError if there is none)."""
        for c in self.question:
            if c.name == name:
                return c
        raise KeyError(f"no question categorisation {name!r}")

    def for_pairs(self) -> tuple[Categorisation, ...]:
        wanted = set(self.two_document_categorisations)
        return tuple(c for c in self.question if c.name in wanted)


def _bad(where: str, field: str, problem: str) -> ConfigError:
    return ConfigError(f"{where}: field {field!r}: {problem}")


def _category(where: str, field: str, name: Any, spec: Any) -> Category:
    if not isinstance(name, str) or not name.strip():
        raise _bad(where, field, f"category names must be text, got {name!r}")
    if not isinstance(spec, dict):
        raise _bad(where, field, "must be a mapping with probability and description")
    unknown = sorted(set(spec) - CATEGORY_FIELDS)
    if unknown:
        raise _bad(where, f"{field}.{unknown[0]}",
                   f"unknown field (known: {', '.join(sorted(CATEGORY_FIELDS))})")
    p = spec.get("probability")
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1:
        raise _bad(where, f"{field}.probability", f"must be a number in [0, 1], got {p!r}")
    desc = spec.get("description")
    if not isinstance(desc, str) or not desc.strip():
        raise _bad(where, f"{field}.description", "is required (the text the prompt uses)")
    checks = spec.get("checks", [])
    if not isinstance(checks, list) or any(c not in CHECKS for c in checks):
        raise _bad(where, f"{field}.checks", f"must list checks among {sorted(CHECKS)}, "
                                             f"got {checks!r}")
    return Category(name, desc.strip(), float(p), tuple(checks),
                    _word_bounds(where, f"{field}.words", spec.get("words")))


def _word_bounds(where: str, field: str, value: Any) -> tuple[int, int] | None:
    """``words: [min, max]`` as a pair of whole numbers with 1 <= min <= max (None if unset)."""
    if value is None:
        return None
    ok = (isinstance(value, list) and len(value) == 2
          and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
          and 1 <= value[0] <= value[1])
    if not ok:
        raise _bad(where, field, f"must be [min, max], whole numbers with 1 <= min <= max, "
                                 f"got {value!r}")
    return value[0], value[1]


def _categorisation(where: str, field: str, name: str, spec: Any) -> Categorisation:
    if not isinstance(spec, dict) or not spec:
        raise _bad(where, field, "must be a non-empty mapping of category: {probability, "
                                 "description}")
    cats = tuple(_category(where, f"{field}.{k}", k, v) for k, v in spec.items())
    total = sum(c.probability for c in cats)
    if abs(total - 1) > SUM_TOLERANCE:
        raise _bad(where, field, f"probabilities sum to {total:.4g}, not 1 ("
                   + ", ".join(f"{c.name}={c.probability:g}" for c in cats) + ")")
    return Categorisation(name, cats)


def parse_taxonomy(data: Any, where: str) -> Taxonomy:
    """Validate a parsed categorisation file (``where`` names it in errors)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with users, question and two_document")
    unknown = sorted(set(data) - TOP_FIELDS)
    if unknown:
        raise _bad(where, unknown[0], f"unknown field (known: {', '.join(sorted(TOP_FIELDS))})")
    for field in ("users", "question", "two_document"):
        if field not in data:
            raise _bad(where, field, "is required")
    users = _categorisation(where, "users", "users", data["users"])
    if not isinstance(data["question"], dict) or not data["question"]:
        raise _bad(where, "question", "must be a non-empty mapping of categorisations")
    question = tuple(_categorisation(where, f"question.{k}", k, v)
                     for k, v in data["question"].items())
    pairs = _categorisation(where, "two_document", "two_document", data["two_document"])
    names = [c.name for c in question]
    wanted = data.get("two_document_categorisations", [])
    if not isinstance(wanted, list) or any(w not in names for w in wanted):
        raise _bad(where, "two_document_categorisations",
                   f"must list question categorisations among {names}, got {wanted!r}")
    text = yaml.safe_dump(data, sort_keys=True)
    return Taxonomy(users, question, pairs, tuple(wanted), where,
                    hashlib.sha256(text.encode()).hexdigest())


def load_taxonomy(path: str | Path | None = None) -> Taxonomy:
    """The categorisations in ``path`` (YAML), or a shipped taxonomy by name (``default``
    when None; see :data:`SHIPPED`)."""
    name = DEFAULT_FILE if path is None else SHIPPED.get(str(path))
    if name is not None:
        text = resources.files("intentrank.generate").joinpath(name).read_text("utf-8")
        where = f"<shipped {name}>"
    else:
        path = Path(path)  # type: ignore[arg-type]
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such categorisation file (shipped taxonomies: "
                              f"{', '.join(SHIPPED)})") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
                              ) from None
        where = str(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{where}:{line} is not valid YAML ({exc})") from None
    return parse_taxonomy(data, where)
