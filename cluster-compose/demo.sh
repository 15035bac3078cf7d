#!/usr/bin/env bash
# Runs the cache-refresh demo (demo/) against a local 6-node cluster that it starts
# and stops itself. The demo is built first (optimized, with only what it needs; a
# few minutes the first time), then the cluster starts, then the demo runs for
# DEMO_SECONDS (20) and ends with its verdict; the exit status is the demo's.
#
#   bash cluster-compose/demo.sh                  # Redis (installs redis-server if missing)
#   bash cluster-compose/demo.sh --server valkey  # the pinned Valkey 8.1.8
#   DEMO_SECONDS=60 bash cluster-compose/demo.sh  # a longer run
#
# REDIS_SERVER / REDIS_CLI choose other binaries (see cluster-compose/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

ensure=()
case "${1:-}" in
  "" | --server=redis) ;;
  --server=valkey) ensure=(--valkey) ;;
  --server)
    case "${2:-}" in
      redis) ;;
      valkey) ensure=(--valkey) ;;
      *) echo "demo.sh: --server must be redis or valkey" >&2; exit 1 ;;
    esac
    ;;
  *) echo "usage: bash cluster-compose/demo.sh [--server redis|valkey]" >&2; exit 1 ;;
esac

echo "building the demo (cargo build --release -p redis-rwlock-demo)"
cargo build --release -p redis-rwlock-demo
demo="${CARGO_TARGET_DIR:-target}/release/redis-rwlock-demo"

# Sets REDIS_SERVER / REDIS_CLI, which the launcher below uses. (The assignment
# first, so that a failure of ensure-redis.sh stops the demo.)
exports=$(bash cluster-compose/ensure-redis.sh "${ensure[@]}")
eval "$exports"

# The launcher runs until its stdin closes: feed it from a pipe we hold open.
coproc CLUSTER { bash cluster-compose/local-cluster.sh; }
stop_cluster() {
  eval "exec ${CLUSTER[1]}>&-"
  wait "$CLUSTER_PID" 2>/dev/null || true
}
trap stop_cluster EXIT

nodes=""
while IFS= read -r line <&"${CLUSTER[0]}"; do
  case "$line" in
    REDIS_CLUSTER_NODES=*) nodes="${line#REDIS_CLUSTER_NODES=}" ;;
    READY) break ;;
  esac
done
if [ -z "$nodes" ]; then
  echo "the local cluster did not start" >&2
  exit 1
fi
server=$("$REDIS_SERVER" --version | sed -E 's/^([A-Za-z]+) server v=([0-9.]+).*/\1 \2/')
echo "local cluster ($server): $nodes"
REDIS_CLUSTER_NODES="$nodes" "$demo"
