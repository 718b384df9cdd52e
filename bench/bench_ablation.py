"""The ablation of the cascaded tri-modal pipeline (issue 5) on one collection: the shipped
experiment file ``cascade-ablation`` (or ``--experiment FILE``) run by the harness.

    .venv/bin/python bench/bench_ablation.py --collection scifact --sample 100  # docs' fast run
    .venv/bin/python bench/bench_ablation.py --collection cranfield --sample 3  # smoke test

Writes ``<out>.{md,html,json}`` and the section ``ablation-<tag>`` of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from report import DATA, header, write_section

COLLECTIONS = ("scifact", "cranfield", "vaswani")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collection", choices=COLLECTIONS, default="scifact")
    p.add_argument("--experiment", default="cascade-ablation",
                   help="experiment file or shipped name (its pipelines and analyses)")
    p.add_argument("--split", default="test", help="qrels split to evaluate on")
    p.add_argument("--sample", type=int, default=0,
                   help="fixed-seed sample of this many queries (0 = the full split)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample and the tests")
    p.add_argument("--out", type=Path, default=None,
                   help="output path without suffix (default docs/ablation/<collection>)")
    p.add_argument("--index", type=Path, default=None,
                   help="index directory (default indexes/<collection>, built if missing)")
    p.add_argument("--llm", default="embedded", help="LLM spec ('embedded', 'openai:...')")
    p.add_argument("--no-llm", action="store_true", help="skip the LLM configurations")
    p.add_argument("--no-llm-cache", action="store_true", help="do not replay cached replies")
    p.add_argument("--cross-encoder", type=Path, default=None,
                   help="int8 ONNX cross-encoder directory (default: the trained SciFact one)")
    p.add_argument("--no-cross-encoder", action="store_true", help="skip the CE configurations")
    p.add_argument("--no-dynamic", action="store_true", help="static weights only")
    p.add_argument("--listwise-chars", type=int, default=0,
                   help="characters of each passage shown to the listwise LLM (default: "
                        "the experiment file's)")
    p.add_argument("--tag", default="", help="suffix of the report name and section")
    return p.parse_args(argv)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from intentrank.data.dataset import load_dataset
    from intentrank.eval.harness import run_experiment
    from intentrank.eval.spec import load_experiment
    from intentrank.index import open_or_build
    from intentrank.report import write_report
    from intentrank.report.markdown import render

    spec = load_experiment(args.experiment).replace(
        dataset=args.collection, split=args.split, sample=args.sample, seed=args.seed)
    if args.listwise_chars and not args.no_llm:
        spec = spec.with_params("listwise", max_passage_chars=args.listwise_chars)
    if args.cross_encoder and not args.no_cross_encoder:
        spec = spec.with_params("cross_encoder", model=str(args.cross_encoder))
    without = (["llm"] if args.no_llm else []) + (["dynamic"] if args.no_dynamic else []) + (
        ["cross_encoder"] if args.no_cross_encoder else [])
    ds = load_dataset(DATA / args.collection)
    index = open_or_build(ds.corpus, args.index or ROOT / "indexes" / args.collection,
                          log=log, source=args.collection)
    ds.check_qrels(index.doc_and_parent_ids)
    result = run_experiment(spec, index=index, dataset=ds, llm=args.llm, without=without,
                            resources={"llm_options": {"cache": not args.no_llm_cache}},
                            log=log)
    result.notes.append("Run: " + header().replace("\n- ", "; ").strip("- \n"))
    tag = f"{args.collection}-{f'sample{args.sample}' if args.sample else 'full'}"
    tag += f"-{args.tag}" if args.tag else ""
    for path in write_report(result, args.out or ROOT / "docs" / "ablation" / tag):
        log(f"wrote {path}")
    which = f"a seed-{args.seed} sample of {args.sample}" if args.sample else "all"
    write_section(f"ablation-{tag}", f"## Cascade ablation: {args.collection}, {which} "
                  f"{args.split} queries, experiment `{args.experiment}`"
                  f"{', reply cache off (cold)' if args.no_llm_cache else ''} (issue 5)\n\n"
                  f"{header()}\nFull report with plots: "
                  f"[docs/ablation/{tag}.html](ablation/{tag}.html)\n\n"
                  + render(result).split("\n", 1)[1])
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
