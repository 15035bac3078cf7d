#!/usr/bin/env bash
# server_cost.sh - what an uncontended acquisition costs the server, on Redis and
# on Valkey side by side: the "Redis and Valkey" section of BENCHMARKS.md.
#
#   bash benches/rwlock/server_cost.sh [rounds]      (default 4)
#
# Runs the benchmark's server_cost scenario (BENCH_SCENARIOS=server_cost, for
# redis-rwlock and the original design, one run per process) on a private
# 6-node cluster of each server, alternating redis, valkey, redis, valkey, ...
# `rounds` times each, and prints the median (min-max) over the rounds of:
#   - script time per acquisition: INFO commandstats, FCALL* and EVAL* rows, on the lock's
#     master (acquire script + release script);
#   - main-thread CPU per acquisition: INFO cpu used_cpu_{user,sys}_main_thread
#     deltas on the lock's master (parsing, scripts, replication feed).
# Redis is what ensure-redis.sh finds (REDIS_SERVER/REDIS_CLI or PATH), Valkey
# the pinned 8.1.8 (ensure-redis.sh --valkey). Each round's report and result
# file are kept in bench-results/server_cost/.

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

rounds=${1:-4}
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "server_cost.sh: rounds must be a positive number" >&2; exit 1; }

declare -A server_env
server_env[redis]=$(bash cluster-compose/ensure-redis.sh)
server_env[valkey]=$(bash cluster-compose/ensure-redis.sh --valkey)

cargo bench --bench rwlock --no-run
out=bench-results/server_cost
rm -rf "$out"
mkdir -p "$out"

for ((round = 1; round <= rounds; round++)); do
    for server in redis valkey; do
        echo "server_cost.sh: round $round/$rounds, $server" >&2
        (
            eval "${server_env[$server]}"
            BENCH_SCENARIOS=server_cost BENCH_IMPLS=redis_rwlock,original BENCH_RUNS=1 \
                cargo bench --bench rwlock >/dev/null
        ) || { echo "server_cost.sh: the benchmark failed on $server (round $round)" >&2; exit 1; }
        cp bench-results/rwlock.json "$out/$server-$round.json"
        cp bench-results/rwlock.md "$out/$server-$round.md"
    done
done

python3 - "$out" "$rounds" <<'PY'
import glob, json, os, sys

out, rounds = sys.argv[1], int(sys.argv[2])
values = {}   # (server, implementation, metric) -> [value per round]
version = {}
load = []
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    server = os.path.basename(path).split("-")[0]
    data = json.load(open(path))
    # "Redis server v=7.0.15 sha=..." -> "Redis 7.0.15"
    version[server] = data["machine"]["redis_server"].split(" sha=")[0].replace(" server v=", " ")
    load.append(data["machine"]["loadavg_start"])
    for m in data["metrics"]:
        if m["scenario"] != "server_cost":
            continue
        values.setdefault((server, m["implementation"], m["metric"]), []).extend(m["runs"])

def cell(key):
    v = values.get(key)
    if not v:
        return "-"
    f = lambda x: f"{x:.1f}" if x < 100 else f"{x:.0f}"
    mid = sorted(v)[(len(v) - 1) // 2]  # nearest rank, as the benchmark reports
    return f"{f(mid)} ({f(min(v))}-{f(max(v))})"

labels = {"redis_rwlock": "redis-rwlock", "original": "original design (baseline)"}
print(f"{rounds} rounds per server, alternating; load average (1 min) at the starts: {', '.join(l.split()[0] for l in load)}")
print()
print(f"| implementation | mode | script time, {version.get('redis')} (us) | script time, {version.get('valkey')} (us) "
      f"| main-thread CPU, {version.get('redis')} (us) | main-thread CPU, {version.get('valkey')} (us) | scripts per acquisition |")
print("|---|---|---|---|---|---|---|")
for imp in ("redis_rwlock", "original"):
    for mode in ("read", "write"):
        if ("redis", imp, f"{mode}_cpu_us_per_acq") not in values:
            continue
        print(f"| {labels[imp]} | {mode} "
              f"| {cell(('redis', imp, f'{mode}_script_us_per_acq'))} "
              f"| {cell(('valkey', imp, f'{mode}_script_us_per_acq'))} "
              f"| {cell(('redis', imp, f'{mode}_cpu_us_per_acq'))} "
              f"| {cell(('valkey', imp, f'{mode}_cpu_us_per_acq'))} "
              f"| {cell(('redis', imp, f'{mode}_scripts_per_acq'))} |")
PY
