"""The Markdown table of the leak fuzzer's counts per endpoint (tests/test_leak_fuzzer.py
writes them to $INTENTRANK_LEAKS_OUT; docs/reliability.md, "Who sees what", shows the
table of bench/leak_results.json).

    INTENTRANK_LEAKS_OUT=$PWD/bench/leak_results.json .venv/bin/pytest -q \\
        tests/test_leak_fuzzer.py -p no:cacheprovider
    .venv/bin/python bench/leak_table.py bench/leak_results.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lib.results import table

COLUMNS = [("requests", "requests"), ("status 2xx", "2xx"), ("status 4xx", "4xx"),
           ("status 5xx", "5xx"), ("documents returned", "documents returned"),
           ("documents cited", "cited"), ("LLM prompts inspected", "prompts inspected"),
           ("passages in prompts", "passages in prompts"),
           ("outside the scope, returned", "outside the scope: returned"),
           ("outside the scope, cited", "cited"), ("outside the scope, in prompts", "in prompts"),
           ("write attempts by keys without write", "writes tried without `write`"),
           ("writes accepted from keys without write", "accepted"),
           ("requests with a revoked or expired key", "requests with a revoked or expired key"),
           ("served after revocation or expiry", "served"),
           ("existence probes", "existence probes"), ("existence told apart", "told apart")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="the fuzzer's JSON counts")
    r = json.loads(parser.parse_args().results.read_text())
    rows = [[f"`{name}`", *(f"{c.get(k, 0):,}" for k, _ in COLUMNS)]
            for name, c in r["endpoints"].items()]
    totals = {k: sum(c.get(k, 0) for c in r["endpoints"].values()) for k, _ in COLUMNS}
    rows.append(["**all**", *(f"**{totals[k]:,}**" for k, _ in COLUMNS)])
    print(f"{r['requests']:,} randomized requests (seed {r['seed']}; "
          f"{totals['requests']:,} HTTP requests: an existence probe sends two) over "
          f"{r['documents']:,} documents, {r['seconds']:.0f} s, {r['date']}\n")
    print(table(["endpoint", *(h for _, h in COLUMNS)], rows,
                "|---|" + "---:|" * len(COLUMNS)))


if __name__ == "__main__":
    main()
