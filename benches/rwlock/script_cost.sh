#!/usr/bin/env bash
# script_cost.sh - server-side cost of the crate's read-acquire script, piece by
# piece, against the original design's: the profile behind BENCHMARKS.md.
#
#   bash benches/rwlock/script_cost.sh [requests]
#
# Starts one private redis-server on a free loopback port (never 7000-7005), loads
# each variant with SCRIPT LOAD, runs it with redis-benchmark from ONE client (no
# pipelining, so the server is never queued) and prints the server's own time per
# call (INFO commandstats usec_per_call). Stops exactly the server it started.
# REDIS_SERVER / REDIS_CLI / REDIS_BENCHMARK choose the binaries (default
# redis-server, redis-cli, redis-benchmark), e.g. the pinned Valkey:
#   eval "$(bash cluster-compose/ensure-redis.sh --valkey)"; bash benches/rwlock/script_cost.sh

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
requests=${1:-20000}

port=$((30000 + RANDOM % 20000))
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
dir=$(mktemp -d)
"${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    --daemonize no >"$dir/log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
cli() { "${REDIS_CLI:-redis-cli}" -p "$port" "$@"; }
for _ in $(seq 50); do cli PING >/dev/null 2>&1 && break; sleep 0.1; done

# The crate composes helpers, the hash layout's hooks and fast paths, queue and
# holds, then the operation (src/redis_backend/scripts/mod.rs).
shared=$(cat lua/helpers.lua lua/hash_layout.lua lua/fast_path.lua lua/queue.lua lua/holds.lua)
compose() { printf '%s\n\n%s' "$shared" "$1"; }

# name | script text
variants=(
    "trivial: return 1|return 1"
    "shared parts only (definitions)|$(compose 'return 1')"
    "shared parts + TIME|$(compose "local t = redis.call('TIME') return 1")"
    "shared parts + load()|$(compose 'bind(KEYS, ARGV) local s = load(ARGV[4]) return 1')"
    "acquire_read.lua, a new reader|$(compose "$(cat lua/acquire_read.lua)")"
)
original=$(cat tests/original/hash_acquire_read.lua)

cost() { # sha args...
    cli CONFIG RESETSTAT >/dev/null
    # -r: a fresh random token in nearly every call, as a new acquisition has.
    "${REDIS_BENCHMARK:-redis-benchmark}" -p "$port" -n "$requests" -c 1 -r 100000000 -q "$@" >/dev/null 2>&1
    cli INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p'
}

# A lock hash with `n` live readers (and the fields our readers keep; the hash
# grows by the acquires of the measurement itself, which no script reads).
seed() {
    cli DEL 'rwlock:{x}' >/dev/null
    cli HSET 'rwlock:{x}' read 1 rstamp 1 fence 5 readers "$1" readers_until 99999999999999 >/dev/null
    for i in $(seq "$1"); do cli HSET 'rwlock:{x}' "r:tok$i" 99999999999999 >/dev/null; done
}

printf '%-40s %12s %12s\n' "variant" "1 reader" "64 readers"
for entry in "${variants[@]}"; do
    name=${entry%%|*}
    sha=$(cli SCRIPT LOAD "${entry#*|}")
    row=()
    for n in 1 64; do
        seed "$n"
        row+=("$(cost EVALSHA "$sha" 1 'rwlock:{x}' PUBLISH 10000 10000 tok__rand_int__ 10000 1)")
    done
    printf '%-40s %12s %12s\n' "$name" "${row[0]} us" "${row[1]} us"
done
sha=$(cli SCRIPT LOAD "$original")
cli DEL 'orig:{x}' >/dev/null
now=$(($(date +%s) * 1000))
printf '%-40s %12s %12s\n' "original design read acquire" \
    "$(cost EVALSHA "$sha" 1 'orig:{x}' 10000 1000 3000 "$now") us" "(one field)"
