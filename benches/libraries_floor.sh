#!/usr/bin/env bash
# libraries_floor.sh - what libraries left behind by old crate versions cost every
# FCALL, and what `redis-rwlock libraries --remove-others` gives back: the run behind
# BENCHMARKS.md "Libraries left behind: FCALL's floor".
#
#   bash benches/libraries_floor.sh [rounds] [requests]     (default 61 rounds, 10000)
#
# Starts one private redis-server on a free loopback port (never 7000-7005) and
# measures the floor of a function call: a library whose one function is `return 1`,
# called as `FCALL floor_one 0` by redis-benchmark from ONE client without
# pipelining (-c 1 -P 1). Three states, measured in turn in every round:
#
#   1 library    the `return 1` library alone
#   16           plus the crate's real library (loaded by the tool, as a lock does)
#                and 14 copies of its text under other names, as 14 older versions
#                would have left them
#   2            after `redis-rwlock libraries --remove-others`: the `return 1`
#                library and this version's
#
# Per state: the server's own time per call (INFO commandstats usec_per_call), also
# as a multiple of the 1-library state's in the same round, the client's time per
# request (1 / requests per second) and the functions' Lua heap, each as the median
# and the range over the rounds: over all rounds, then over the quiet ones, in which
# every state's client time stayed within 1.5 times the run's fastest. On a shared
# virtual machine, slow spells of seconds double every time: rounds are short, so a
# spell tends to cover a round's states alike (the multiple holds), and the quiet
# rounds leave the spells out. Each measurement follows a warm-up of a tenth of its
# requests.
#
# Builds the tool (cargo build --features cli) unless REDIS_RWLOCK names one.
# REDIS_SERVER / REDIS_CLI / REDIS_BENCHMARK choose the binaries (default
# redis-server, redis-cli, redis-benchmark). Stops exactly the server it started.

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${1:-61}
requests=${2:-10000}
copies=14

server=${REDIS_SERVER:-redis-server}
tool=${REDIS_RWLOCK:-}
if [[ -z $tool ]]; then
    cargo build --quiet --features cli --bin redis-rwlock
    tool=${CARGO_TARGET_DIR:-target}/debug/redis-rwlock
fi

dir=$(mktemp -d)
pid=
trap '{ [[ -n $pid ]] && kill "$pid" && wait "$pid"; } 2>/dev/null; rm -rf "$dir"' EXIT

# A free port: probed, then taken by the server; another try if it was taken meanwhile.
for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 25000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
    "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
        --daemonize no >"$dir/log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do
        "${REDIS_CLI:-redis-cli}" -p "$port" PING >/dev/null 2>&1 && break 2
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    { kill "$pid" && wait "$pid"; } 2>/dev/null || true
    pid=
done
if [[ -z $pid ]]; then
    echo "libraries_floor.sh: could not start $server (log: $(tail -2 "$dir/log"))" >&2
    exit 1
fi
cli() { "${REDIS_CLI:-redis-cli}" -p "$port" "$@"; }
url=redis://127.0.0.1:$port

cli FUNCTION LOAD "#!lua name=floor
redis.register_function('floor_one', function() return 1 end)" >/dev/null

# The crate's library, as a lock loads it (`exec` takes a hold), then its text as
# the server has it: the last field of FUNCTION LIST's one entry.
"$tool" --url "$url" exec --write floor-setup -- true
own=$("$tool" --url "$url" libraries --json | sed -n 's/^ *"this_version": "\(rwlock_[0-9a-f]*\)",$/\1/p')
cli --raw FUNCTION LIST LIBRARYNAME "$own" WITHCODE | sed '1,/^library_code$/d' >"$dir/own.lua"
grep -q "^#!lua name=$own\$" "$dir/own.lua"

# The library's text under another name (its functions carry the name too).
copy() { sed "s/$own/$1/g" "$dir/own.lua"; }

load_old_versions() {
    cli -x FUNCTION LOAD <"$dir/own.lua" >/dev/null
    for i in $(seq "$copies"); do
        copy "$(printf 'rwlock_f%011x' "$i")" | cli -x FUNCTION LOAD >/dev/null
    done
}

# usec_per_call of FCALL, the client's us per request, after a warm-up; then the
# functions' Lua heap (KiB, garbage not yet collected included).
measure() {
    "${REDIS_BENCHMARK:-redis-benchmark}" -p "$port" -n $((requests / 10)) -c 1 -P 1 -q \
        FCALL floor_one 0 >/dev/null
    cli CONFIG RESETSTAT >/dev/null
    rps=$("${REDIS_BENCHMARK:-redis-benchmark}" -p "$port" -n "$requests" -c 1 -P 1 -q \
        FCALL floor_one 0 | tr '\r' '\n' | sed -n 's/^FCALL.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1)
    server_us=$(cli INFO commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_fcall:.*usec_per_call=\([0-9.]*\).*/\1/p')
    heap=$(cli INFO memory | tr -d '\r' | sed -n 's/^used_memory_vm_functions://p')
    echo "$server_us $(awk -v r="$rps" 'BEGIN { printf "%.2f", 1e6 / r }') $((heap / 1024))"
}

libraries() { cli FUNCTION LIST | grep -c '^library_name$' || true; }

: >"$dir/all-1" && : >"$dir/all-16" && : >"$dir/all-2"
for round in $(seq "$rounds"); do
    cli FUNCTION DELETE "$own" >/dev/null
    [[ $(libraries) == 1 ]]
    measure >>"$dir/all-1"

    load_old_versions
    [[ $(libraries) == $((copies + 2)) ]]
    measure >>"$dir/all-16"

    "$tool" --url "$url" libraries --remove-others >"$dir/removed"
    [[ $(wc -l <"$dir/removed") == "$copies" ]]
    [[ $(libraries) == 2 ]]
    measure >>"$dir/all-2"
    echo "round $round of $rounds: $(tail -qn1 "$dir/all-1" "$dir/all-16" "$dir/all-2" | tr '\n' '|')" >&2
done

# The median (min-max) of the numbers on stdin, with $1 decimals.
stats() {
    sort -g | awk -v d="$1" '{ v[NR] = $1 } END {
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        f = "%." d "f"
        printf f " (" f "-" f ")", m, v[1], v[NR] }'
}
# Column $2 of file $1, with $3 decimals.
column() { cut -d' ' -f"$2" "$1" | stats "$3"; }

# The table of the rounds in files $1-1, $1-16 and $1-2: each state, and its server
# time per call over the 1-library state's of the same round.
table() {
    echo "| libraries loaded | server µs per FCALL (usec_per_call) | x the 1-library state's, same round | client µs per request | functions' Lua heap (KiB) |"
    echo "|---|---|---|---|---|"
    local state label more
    for state in 1 16 2; do
        case $state in
            1) label="1: the \`return 1\` library" ;;
            16) label="16: + this version's and $copies copies of it (old versions)" ;;
            2) label="2: after \`redis-rwlock libraries --remove-others\`" ;;
        esac
        more=-
        if [[ $state != 1 ]]; then
            more=$(paste -d' ' "$1-1" "$1-$state" | awk '{ print $4 / $1 }' | stats 2)
        fi
        echo "| $label | $(column "$1-$state" 1 2) | $more | $(column "$1-$state" 2 1) | $(column "$1-$state" 3 0) |"
    done
}

# Quiet rounds: those in which every state's client time stayed within 1.5 times the
# run's fastest, so no state of the round met one of a shared machine's slow spells.
fastest=$(cut -d' ' -f2 "$dir/all-1" "$dir/all-16" "$dir/all-2" | sort -g | head -1)
paste -d' ' "$dir/all-1" "$dir/all-16" "$dir/all-2" |
    awk -v limit="$fastest" '$2 <= 1.5 * limit && $5 <= 1.5 * limit && $8 <= 1.5 * limit' >"$dir/quiet"
cut -d' ' -f1-3 "$dir/quiet" >"$dir/quiet-1"
cut -d' ' -f4-6 "$dir/quiet" >"$dir/quiet-16"
cut -d' ' -f7-9 "$dir/quiet" >"$dir/quiet-2"

echo
echo "$("$server" --version | cut -d' ' -f1-3), $rounds rounds of $requests FCALLs per state, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "All $rounds rounds:"
echo
table "$dir/all"
echo
echo "The $(wc -l <"$dir/quiet") quiet rounds (every client time within 1.5 x the fastest, $fastest µs):"
echo
if [[ -s $dir/quiet ]]; then table "$dir/quiet"; fi
