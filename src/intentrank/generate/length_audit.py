"""What the ``length`` filter would have rejected in question sets generated without it.

Reads each set's ``attempts.jsonl`` (read-only) and, for every question category with
``words: [min, max]`` in a taxonomy (the shipped default unless given; bounds on users or
two-document types are not audited), counts the parsed attempts (those
with a question, i.e. not ``malformed`` or ``no_partner``) and the kept questions whose length
(:func:`.filters.written_words`) falls outside the bounds. The filter runs right after
parsing, so every such attempt would have been a ``length`` rejection; later filters (the
near-duplicate check among them) could then have decided other attempts differently.

``python -m intentrank.generate.length_audit runs/generated/*`` prints the table as markdown.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from pathlib import Path

from intentrank.data.readers import iter_jsonl
from intentrank.errors import DataError
from intentrank.generate.categories import Taxonomy, load_taxonomy
from intentrank.generate.filters import written_words
from intentrank.generate.runlog import ATTEMPTS

ALL = "all sets"


@dataclass
class AuditRow:
    """One set (or ``all sets``) and one bounded category."""

    set_name: str
    categorisation: str
    category: str
    bounds: tuple[int, int]
    lengths: list[int]  # word counts of the parsed attempts' questions
    rejected: int  # parsed attempts outside the bounds
    kept: int  # kept questions of this category
    kept_lost: int  # kept questions outside the bounds

    @property
    def parsed(self) -> int:
        return len(self.lengths)


def _records(set_dir: Path) -> list[dict]:
    path = set_dir / ATTEMPTS
    if not path.exists():
        raise DataError(f"no {ATTEMPTS}: not a generated question set", set_dir)
    return [record for _, record in iter_jsonl(path)]


def length_audit(set_dirs: list[Path], taxonomy: Taxonomy | None = None, slack: int = 0
                 ) -> list[AuditRow]:
    """Rows per set and bounded category, then the same summed over the sets (``all
    sets``); ``slack`` widens every bound by that many words on each side."""
    taxonomy = taxonomy or load_taxonomy()
    bounded = [(cz.name, c.name, c.words) for cz in taxonomy.question for c in cz.categories
               if c.words is not None]
    rows: list[AuditRow] = []
    for set_dir in set_dirs:
        records = _records(Path(set_dir))
        for group, name, (low, high) in bounded:
            low, high = max(1, low - slack), high + slack
            mine = [r for r in records if (r.get("categories") or {}).get(group) == name]
            parsed = [r for r in mine if r.get("question")]
            lengths = [written_words(r["question"]) for r in parsed]
            outside = [not low <= n <= high for n in lengths]
            kept = [o for r, o in zip(parsed, outside, strict=True) if r["status"] == "kept"]
            rows.append(AuditRow(Path(set_dir).name, group, name, (low, high), lengths,
                                 sum(outside), len(kept), sum(kept)))
    totals: dict[tuple[str, str], AuditRow] = {}
    for r in rows:
        t = totals.setdefault((r.categorisation, r.category), AuditRow(
            ALL, r.categorisation, r.category, r.bounds, [], 0, 0, 0))
        t.lengths += r.lengths
        t.rejected, t.kept, t.kept_lost = (t.rejected + r.rejected, t.kept + r.kept,
                                           t.kept_lost + r.kept_lost)
    return rows + list(totals.values())


def render_markdown(rows: list[AuditRow]) -> str:
    """The audit as a markdown table."""
    lines = ["| set | category | words asked | parsed attempts | their words: median (min-max) "
             "| would reject | kept | kept, would reject |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        spread = (f"{statistics.median(r.lengths):g} ({min(r.lengths)}-{max(r.lengths)})"
                  if r.lengths else "-")
        share = f" ({r.rejected / r.parsed:.0%})" if r.parsed else ""
        name = f"**{r.set_name}**" if r.set_name == ALL else r.set_name
        lines.append(f"| {name} | {r.category} | {r.bounds[0]}-{r.bounds[1]} | {r.parsed} | "
                     f"{spread} | {r.rejected}{share} | {r.kept} | {r.kept_lost} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="+", type=Path, help="generated question set directories")
    parser.add_argument("--config", type=Path, help="categorisation file (default: shipped)")
    parser.add_argument("--slack", type=int, default=0, help="widen every bound by N words")
    args = parser.parse_args(argv)
    sets = [s for s in args.sets if s.is_dir()]
    print(render_markdown(length_audit(sets, load_taxonomy(args.config), args.slack)), end="")


if __name__ == "__main__":
    main()
