#!/usr/bin/env bash
# Install (if needed) and run the whole test suite, real-data tests included.
#   bash scripts/test.sh            everything (what CI runs), with one fault test across
#                                   namespace hosts (-m cluster; the rest: scripts/faults.sh)
#   bash scripts/test.sh --fast     the fast tier: no test marked slow (no real LLM, no
#                                   training, no Ray, no dense encoding of a collection)
# Other arguments go to pytest (e.g. tests/test_eval.py -k ties).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export INTENTRANK_CACHE=${INTENTRANK_CACHE:-$PWD/.cache/tests}  # not the benchmarks' cache
.venv/bin/ruff check .
full=yes
[ $# -eq 0 ] || full=no
if [ "${1:-}" = "--fast" ]; then
    shift
    set -- -m "not slow" "$@"
    full=fast
fi
# The whole suite (or the fast tier) on both cores: pytest-xdist, one file per unit of work
# (its module fixtures built once), the files that start Ray as one unit (tests/conftest.py); costs in
# docs/architecture.md "Tests". INTENTRANK_TEST_WORKERS=0 runs it in one process.
workers=${INTENTRANK_TEST_WORKERS:-2}
if [ "$full" != no ] && [ "$workers" != 0 ]; then
    set -- -n "$workers" --dist loadfile "$@"
fi
if [ "$full" = yes ]; then
    # One fault test across hosts, in the same run (in the Ray files' unit of work, so one
    # cluster at a time): a Ray head + 2 workers in network namespaces, a worker host
    # SIGKILLed mid-encoding (about a minute; skips without root or iproute2). The rest:
    # bash scripts/faults.sh (docs/reliability.md, "Faults survived").
    export INTENTRANK_FAULTS_DOCS=200
    export INTENTRANK_OPT_IN="tests/test_faults_cluster.py::test_index_on_ray_across_hosts[host-lost]"
fi
.venv/bin/pytest -q "$@"
