#!/usr/bin/env bash
# profile.sh - where Redis spends the time of one of the crate's script calls, and
# of one of the original design's: `perf` on the masters of a private local
# cluster while the benchmark's server-cost scenario runs (uncontended acquire +
# release, both designs, nothing else), the samples sorted by profile_stacks.py
# into what the server does for an FCALL (ours) and an EVALSHA (the original's).
#
#   REDIS_SERVER=/path/to/redis-server bash benches/rwlock/profile.sh [runs]
#
# The server needs its symbols: Debian's redis-server is stripped, so build one
# (`git clone https://github.com/redis/redis; cd redis; git checkout 7.0.15; make`)
# and point REDIS_SERVER (and REDIS_CLI) at src/. Needs perf and python3. The
# benchmark's report goes to a temporary directory (bench-results/ is left as
# it is); the two tables are printed, each with its call count and commandstats'
# time per call from the same window. BENCHMARKS.md ("Where the time goes")
# explains them.

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
runs=${1:-5}
for tool in perf python3; do
    command -v "$tool" >/dev/null || { echo "profile.sh: $tool is missing" >&2; exit 1; }
done
server=${REDIS_SERVER:-redis-server}
if ! nm "$(command -v "$server")" 2>/dev/null | grep ' luaCallFunction$' >/dev/null; then
    echo "profile.sh: $server has no symbols (luaCallFunction); build Redis from source," \
        "see the comment at the top" >&2
    exit 1
fi

dir=$(mktemp -d)
mkfifo "$dir/in"
bash cluster-compose/local-cluster.sh <"$dir/in" >"$dir/launcher" 2>"$dir/launcher.err" &
launcher=$!
exec 3>"$dir/in" # the launcher stops when this closes
cleanup() {
    exec 3>&-
    wait "$launcher" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 120); do grep -q '^READY' "$dir/launcher" && break; sleep 0.5; done
grep -q '^READY' "$dir/launcher" || { cat "$dir/launcher.err" >&2; exit 1; }
nodes=$(sed -n 's/^REDIS_CLUSTER_NODES=//p' "$dir/launcher")
masters=$(awk '$1 == "NODE" && $4 == "master" { print $2 }' "$dir/launcher")
pids=$(awk '$1 == "NODE" && $4 == "master" { print $3 }' "$dir/launcher" | paste -sd,)

cli() { "${REDIS_CLI:-redis-cli}" -u "$1" "${@:2}"; }
calls() { # calls of command $1 (commandstats' lower-case name) over all masters
    local total=0 url n
    for url in $masters; do
        n=$(cli "$url" INFO commandstats | tr -d '\r' | sed -n "s/^cmdstat_$1:calls=\([0-9]*\),.*/\1/p")
        total=$((total + ${n:-0}))
    done
    echo "$total"
}
usec_per_call() { # commandstats' time per call of command $1 over all masters
    local calls=0 usec=0 url line
    for url in $masters; do
        line=$(cli "$url" INFO commandstats | tr -d '\r' | grep "^cmdstat_$1:" || true)
        [[ -n $line ]] || continue
        calls=$((calls + $(sed "s/^cmdstat_$1:calls=\([0-9]*\),.*/\1/" <<<"$line")))
        usec=$((usec + $(sed 's/.*,usec=\([0-9]*\),.*/\1/' <<<"$line")))
    done
    awk -v u="$usec" -v c="$calls" 'BEGIN { if (c) printf "%.1f", u / c; else print "-" }'
}

cargo bench --bench rwlock --no-run >/dev/null 2>&1
for url in $masters; do cli "$url" CONFIG RESETSTAT >/dev/null; done
perf record -F 4000 --call-graph dwarf,16384 -p "$pids" -o "$dir/perf.data" >/dev/null 2>&1 &
perf=$!
sleep 1
REDIS_CLUSTER_NODES=$nodes BENCH_SCENARIOS=server_cost BENCH_IMPLS=redis_rwlock,original \
    BENCH_RUNS=$runs BENCH_OUT=$dir/report cargo bench --bench rwlock >/dev/null 2>"$dir/bench.err" ||
    { cat "$dir/bench.err" >&2; exit 1; }
kill -INT "$perf"
wait "$perf" 2>/dev/null || true
for kind in fcall evalsha; do
    case $kind in
    fcall) who="redis-rwlock" ;;
    evalsha) who="the original design" ;;
    esac
    echo "$who: $(calls $kind) ${kind^^} calls; commandstats (under perf): $(usec_per_call $kind) us per call"
    echo
    python3 benches/rwlock/profile_stacks.py "$dir/perf.data" "$kind" "$(calls $kind)"
    echo
done
