#!/usr/bin/env bash
# Faults across hosts and the long soak (docs/reliability.md, "Faults survived"):
#   bash scripts/faults.sh            the cluster tests (Ray head + 2 workers in network
#                                     namespaces, hosts SIGKILLed mid-job; needs root and
#                                     iproute2), then the 22-minute soak of the service
#   bash scripts/faults.sh --cluster  the cluster tests only
#   bash scripts/faults.sh --soak     the soak only (extra arguments go to bench_soak.py,
#                                     e.g. --minutes 3 --rebuild-at 90 for a short one)
#   bash scripts/faults.sh --shards   a cluster index (issue 57) across the namespace hosts:
#                                     fan-out measured, a host SIGKILLed under queries,
#                                     healed, the host back and rejoining (root, iproute2;
#                                     about 6 min here) -> bench/cluster_results.json
# Writes bench/faults_results.json and bench/soak_results.json and prints their tables.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export INTENTRANK_CACHE=${INTENTRANK_CACHE:-$PWD/.cache/tests}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
what=${1:-all}
[ $# -gt 0 ] && shift
if [ "$what" = all ] || [ "$what" = --cluster ]; then
    rm -f bench/faults_results.json
    INTENTRANK_FAULTS_OUT=$PWD/bench/faults_results.json \
        "$VENV/bin/pytest" -q -m cluster tests/test_faults_cluster.py -p no:cacheprovider
    "$VENV/bin/python" bench/faults_table.py bench/faults_results.json
fi
if [ "$what" = all ] || [ "$what" = --shards ]; then
    INTENTRANK_CLUSTER_OUT=$PWD/bench/cluster_results.json \
        "$VENV/bin/pytest" -q -s -m cluster tests/test_faults_shards.py -p no:cacheprovider
    "$VENV/bin/python" bench/bench_cluster.py table bench/cluster_results.json
fi
if [ "$what" = all ] || [ "$what" = --soak ]; then
    INTENTRANK_SOAK_OUT=$PWD/bench/soak_results.json INTENTRANK_SOAK_ARGS="$*" \
        "$VENV/bin/pytest" -q -s -m soak tests/test_soak.py -p no:cacheprovider
fi
