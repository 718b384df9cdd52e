#!/usr/bin/env bash
# Create .venv and install intentrank with everything it needs (offline-safe: torch first,
# pinned, so nothing pulls a CUDA build). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
quiet .venv/bin/pip install -q torch==2.13.0
quiet .venv/bin/pip install -q -e ".[all,dev]"
echo "intentrank installed in .venv ($(.venv/bin/python -c 'import intentrank; print(intentrank.__version__)'))"
