"""The ablation of the cascaded tri-modal pipeline (issue 5) on one collection: the shipped
experiment file ``cascade-ablation`` run by the harness on its test queries.

    .venv/bin/python bench/bench_ablation.py --collection scifact --sample 100  # docs' fast run
    .venv/bin/python bench/bench_ablation.py --collection cranfield --sample 3  # smoke test

Writes ``docs/ablation/<collection>-<sample>[-<tag>].{md,html,json}`` and that name's
section ``ablation-...`` of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from report import DATA, ROOT, header, log, write_section


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collection", choices=("scifact", "cranfield", "vaswani"),
                   default="scifact")
    p.add_argument("--sample", type=int, default=0,
                   help="fixed-seed (0) sample of this many queries (0 = the full split)")
    p.add_argument("--no-llm-cache", action="store_true", help="do not replay cached replies")
    p.add_argument("--no-dynamic", action="store_true", help="static weights only")
    p.add_argument("--listwise-chars", type=int, default=0,
                   help="characters of each passage shown to the listwise LLM (default: "
                        "the experiment file's)")
    p.add_argument("--tag", default="", help="suffix of the report name and section")
    args = p.parse_args(argv)
    from intentrank.data.dataset import load_dataset
    from intentrank.errors import ConfigError
    from intentrank.eval.harness import run_experiment
    from intentrank.eval.spec import load_experiment
    from intentrank.index import open_or_build
    from intentrank.report import write_report
    from intentrank.report.markdown import render

    spec = load_experiment("cascade-ablation").replace(
        dataset=args.collection, split="test", sample=args.sample, seed=0)
    if args.listwise_chars:  # ConfigError: the file's listwise already sees that many
        with contextlib.suppress(ConfigError):
            spec = spec.with_params("listwise", max_passage_chars=args.listwise_chars)
    ds = load_dataset(DATA / args.collection)
    index = open_or_build(ds.corpus, ROOT / "indexes" / args.collection, log=log,
                          source=args.collection)
    ds.check_qrels(index.doc_and_parent_ids)
    result = run_experiment(spec, index=index, dataset=ds, llm="embedded",
                            without=["dynamic"] if args.no_dynamic else [],
                            resources={"llm_options": {"cache": not args.no_llm_cache}},
                            log=log)
    result.notes.append("Run: " + header().replace("\n- ", "; ").strip("- \n"))
    tag = f"{args.collection}-{f'sample{args.sample}' if args.sample else 'full'}"
    tag += f"-{args.tag}" if args.tag else ""
    for path in write_report(result, ROOT / "docs" / "ablation" / tag):
        log(f"wrote {path}")
    which = f"a seed-0 sample of {args.sample}" if args.sample else "all"
    write_section(f"ablation-{tag}", f"## Cascade ablation: {args.collection}, {which} test "
                  f"queries, experiment `cascade-ablation`"
                  f"{', reply cache off (cold)' if args.no_llm_cache else ''} (issue 5)\n\n"
                  f"{header()}\nFull report with plots: "
                  f"[docs/ablation/{tag}.html](ablation/{tag}.html)\n\n"
                  + render(result).split("\n", 1)[1])
    print(render(result))


if __name__ == "__main__":
    main()
