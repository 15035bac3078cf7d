#!/usr/bin/env bash
# ensure-redis.sh - make sure `redis-server` and `redis-cli` (>= 7.0) are on
# PATH, installing Debian/Ubuntu packages with apt-get if they are missing.
#
#   bash cluster-compose/ensure-redis.sh
#
# Redis 7.0 is the minimum because the lock publishes wake-ups with SPUBLISH
# (sharded pub/sub). If the package starts a system redis service (port 6379),
# it is left alone: the tests start their own servers on free ports.

set -euo pipefail

readonly MIN_MAJOR=7
readonly MIN_MINOR=0

log() { echo "ensure-redis: $*" >&2; }
die() { log "error: $*"; exit 1; }

have_redis() {
    command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1
}

install_redis() {
    command -v apt-get >/dev/null 2>&1 \
        || die "redis-server/redis-cli not found and apt-get is not available; install Redis >= $MIN_MAJOR.$MIN_MINOR yourself (or use cluster-compose/docker-compose.yml)"

    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 \
            || die "redis-server not found, not running as root, and sudo is not available; run as root: apt-get install -y redis-server redis-tools"
        sudo=(sudo)
    fi

    log "redis-server/redis-cli not found; installing redis-server and redis-tools with apt-get"
    "${sudo[@]}" apt-get update \
        || die "apt-get update failed; install redis-server and redis-tools by hand"
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y redis-server redis-tools \
        || die "apt-get install redis-server redis-tools failed; install them by hand"
    hash -r
    have_redis || die "redis-server/redis-cli still not on PATH after installing (PATH=$PATH)"
}

# Print "MAJOR MINOR" of a `--version` output such as
#   "Redis server v=7.0.15 sha=..."  or  "redis-cli 7.0.15".
parse_version() {
    sed -nE 's/.*(v=|redis-cli )([0-9]+)\.([0-9]+).*/\2 \3/p' <<<"$1" | head -n 1
}

check_version() {
    local bin=$1 out major minor
    out=$("$bin" --version 2>&1) || die "'$bin --version' failed: $out"
    read -r major minor <<<"$(parse_version "$out")" || true
    [[ -n "${major:-}" && -n "${minor:-}" ]] || die "cannot read the version of $bin from: $out"
    if ((major < MIN_MAJOR || (major == MIN_MAJOR && minor < MIN_MINOR))); then
        die "$bin is version $major.$minor at $(command -v "$bin"); Redis >= $MIN_MAJOR.$MIN_MINOR is required (SPUBLISH, CLUSTER SHARDS). Install a newer Redis (e.g. from packages.redis.io) or use cluster-compose/docker-compose.yml"
    fi
    log "$bin $major.$minor ok ($(command -v "$bin"))"
}

have_redis || install_redis
check_version redis-server
check_version redis-cli
