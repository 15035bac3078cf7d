#!/usr/bin/env bash
# Runs the cache-refresh demo against a local 6-node cluster that it starts and
# stops itself. Installs redis-server first if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

bash cluster-compose/ensure-redis.sh

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
echo "local cluster: $nodes"
REDIS_CLUSTER_NODES="$nodes" cargo run --example cache_refresh
