#!/usr/bin/env bash
# Install (if needed) and run the whole test suite, real-data tests included.
#   bash scripts/test.sh            everything (what CI runs)
#   bash scripts/test.sh --fast     the fast tier: no test marked slow (no real LLM, no
#                                   training, no Ray, no dense encoding of a collection)
# Other arguments go to pytest (e.g. tests/test_eval.py -k ties).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export INTENTRANK_CACHE=${INTENTRANK_CACHE:-$PWD/.cache/tests}  # not the benchmarks' cache
.venv/bin/ruff check .
if [ "${1:-}" = "--fast" ]; then
    shift
    set -- -m "not slow" "$@"
fi
.venv/bin/pytest -q "$@"
