#!/usr/bin/env bash
# Install (if needed) and run the whole test suite, real-data tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export INTENTRANK_CACHE=${INTENTRANK_CACHE:-$PWD/.cache/intentrank}
.venv/bin/ruff check .
.venv/bin/pytest -q "$@"
