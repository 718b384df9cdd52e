"""The ablation of the cascaded tri-modal pipeline (issue 5) on one collection.

    .venv/bin/python bench/bench_ablation.py --collection scifact             # full test split
    .venv/bin/python bench/bench_ablation.py --collection cranfield --sample 3  # smoke test

Runs the five configurations (and the dynamic-weight variants) with the int8 ONNX
cross-encoder trained on SciFact (128 tokens) and the embedded LLM (replies cached on disk),
writes ``<out>.md``, ``<out>.html`` and ``<out>.json`` and prints the paper's SciFact numbers
beside ours. The index is opened from ``indexes/<collection>`` (built there if missing).
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
os.environ.setdefault("INTENTRANK_CACHE", str(ROOT / ".cache" / "intentrank"))

from report import DATA, header, write_section  # noqa: E402

COLLECTIONS = ("scifact", "cranfield", "vaswani")
CROSS_ENCODER = ROOT / ".cache" / "intentrank" / "models" / "cross-encoder-scifact"
# The cascaded tri-modal paper, SciFact: nDCG@10 per configuration, latency of the full cascade.
PAPER_SCIFACT = {
    "Tri-modal": {"nDCG@10": 0.7603},
    "Tri-modal + CE": {"nDCG@10": 0.7210},
    "Full pipeline": {"nDCG@10": 0.7556, "s/query": 13.2},
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--collection", choices=COLLECTIONS, default="scifact")
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
    p.add_argument("--cross-encoder", type=Path, default=CROSS_ENCODER,
                   help="int8 ONNX cross-encoder directory")
    p.add_argument("--no-cross-encoder", action="store_true", help="skip the CE configurations")
    p.add_argument("--no-dynamic", action="store_true", help="static weights only")
    p.add_argument("--ce-depth", type=int, default=100,
                   help="fused candidates the cross-encoder scores (the paper: 100)")
    p.add_argument("--listwise-chars", type=int, default=600,
                   help="characters of each passage shown to the listwise LLM")
    p.add_argument("--ce-rrf", action="store_true",
                   help="the CE step outputs RRF(first-stage ranks, CE ranks)")
    p.add_argument("--tag", default="", help="suffix of the report name and section")
    p.add_argument("--tune-weights", action="store_true",
                   help="tune the static weights (train split if any, else k-fold CV) instead "
                        "of the paper's 0.50/0.35/0.15")
    return p.parse_args(argv)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def comparison(report, collection: str) -> str:
    """Ours beside the paper's numbers (the paper reports SciFact only)."""
    lines = [f"{'configuration':<26} {'nDCG@10':>8} {'paper':>8} {'s/query':>8} {'paper':>8}"]
    for r in report.results:
        ref = PAPER_SCIFACT.get(r.name, {}) if collection == "scifact" else {}
        paper = f"{ref['nDCG@10']:.4f}" if "nDCG@10" in ref else "-"
        paper_s = f"{ref['s/query']:.1f}" if "s/query" in ref else "-"
        lines.append(f"{r.name:<26} {r.scores.aggregate['nDCG@10']:>8.4f} {paper:>8} "
                     f"{r.total_ms / 1000:>8.2f} {paper_s:>8}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from intentrank.cli import _open_or_build
    from intentrank.data.dataset import load_dataset
    from intentrank.eval.ablation import STATIC_WEIGHTS, ablate_dataset, write_report
    from intentrank.llm.client import load_llm
    from intentrank.rerank.cross_encoder import CrossEncoderReranker

    ds = load_dataset(DATA / args.collection)
    index = _open_or_build(ds.root, args.index or ROOT / "indexes" / args.collection)
    ds.check_qrels(index.doc_and_parent_ids)
    llm = None if args.no_llm else load_llm(args.llm, cache=not args.no_llm_cache)
    ce = None if args.no_cross_encoder else CrossEncoderReranker(
        index, args.cross_encoder, k=100, backend="onnx", max_length=128)
    weights, source = STATIC_WEIGHTS, "the paper's static weights"
    if args.tune_weights:
        from intentrank.tune.modality import modality_weights_for

        log("tuning the static weights")
        weights, source = modality_weights_for(ds, index, args.split, seed=args.seed,
                                               sample=args.sample)
    report = ablate_dataset(ds, index, args.split, args.sample, args.seed, llm=llm,
                            cross_encoder=ce, dynamic=not args.no_dynamic, weights=weights,
                            ce_depth=args.ce_depth, listwise_chars=args.listwise_chars,
                            ce_rrf=args.ce_rrf, log=log)
    report.notes.append(f"Static weights: {source}.")
    report.notes.append("Run: " + header().replace("\n- ", "; ").strip("- \n"))
    if args.collection == "scifact":
        report.references = PAPER_SCIFACT
        report.reference_source = ("Paper (cascaded tri-modal retrieval, SciFact): nDCG@10 "
                                   "per configuration and the full cascade's latency.")
    tag = f"{args.collection}-{f'sample{args.sample}' if args.sample else 'full'}"
    tag += f"-{args.tag}" if args.tag else ""
    out = args.out or ROOT / "docs" / "ablation" / tag
    for path in write_report(report, out):
        log(f"wrote {path}")
    which = f"a seed-{args.seed} sample of {args.sample}" if args.sample else "all"
    write_section(f"ablation-{tag}", f"## Cascade ablation: {args.collection}, {which} "
                  f"{args.split} queries, CE over top-{args.ce_depth}"
                  f"{' fused with the first stage by RRF' if args.ce_rrf else ''}, listwise sees "
                  f"{args.listwise_chars} chars/passage"
                  f"{', reply cache off (cold)' if args.no_llm_cache else ''} (issue 5)\n\n"
                  f"{header()}\n"
                  f"Full report with plots: "
                  f"[docs/ablation/{tag}.html](ablation/{tag}.html)\n\n"
                  f"```\n{comparison(report, args.collection)}\n```\n\n"
                  + report.to_markdown().split("\n", 1)[1])
    print(comparison(report, args.collection))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
