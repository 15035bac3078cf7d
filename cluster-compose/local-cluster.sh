#!/usr/bin/env bash
# local-cluster.sh - run a throw-away Redis Cluster (or one plain server) on
# loopback, straight from the server binary (Redis or Valkey). No docker needed.
#
#   bash cluster-compose/local-cluster.sh [--standalone] [--tls] [--node-timeout MS] [--server redis|valkey] [--ports BASE|LOW-HIGH]
#
#   --standalone       start one plain (non-cluster) server instead of a cluster
#   --tls              TLS only (port 0 + tls-port; cluster bus and replication
#                      over TLS too): a CA, a server certificate for
#                      127.0.0.1/localhost and a client certificate are made
#                      with openssl in the temporary directory; clients must
#                      trust the CA and may present the client certificate
#                      (tls-auth-clients optional); URLs are rediss://
#   --node-timeout MS  cluster-node-timeout in milliseconds (default 2000)
#   --server valkey    run the pinned Valkey 8.1.8 (downloaded once, see
#                      ensure-redis.sh --valkey) instead of REDIS_SERVER/REDIS_CLI
#   --server redis     the default: REDIS_SERVER / REDIS_CLI when set (path or
#                      command name), else redis-server / redis-cli on PATH,
#                      else valkey-server / valkey-cli on PATH
#   --ports BASE       the nodes listen on BASE, BASE+1, ... (6 ports for a
#                      cluster, 1 with --standalone; the cluster bus on each
#                      port + 10000); the launcher fails if one is taken
#   --ports LOW-HIGH   the nodes' ports are picked at random within LOW-HIGH
#                      (all of them; the bus ports + 10000 may lie outside)
#                      The environment variable LOCAL_CLUSTER_PORTS takes the
#                      same values; --ports wins. Ports from 1024 to 55535.
#
# The server must be Redis >= 7.0 or Valkey (checked with --version).
#
# A cluster has 6 nodes: 3 masters, each with 1 replica. Without --ports,
# ports are picked at random among free ones (base in 20000-45000, cluster bus
# = port + 10000), so several launchers can run side by side and nothing else
# on the machine (for example a cluster on 7000-7005) is disturbed.
#
# When everything is up, stdout gets exactly these lines:
#
#   NODE redis://127.0.0.1:<port> <pid> <master|replica>     (one per node)
#   REDIS_CLUSTER_NODES=<url>,<url>,...                      (cluster mode)
#   REDIS_URL=<url>                                          (--standalone)
#   TLS_CA=<path> / TLS_CLIENT_CERT=<path> / TLS_CLIENT_KEY=<path>  (--tls)
#   READY
#
# Then the script stays in the foreground until its stdin reaches EOF (a test
# harness closes the pipe) or it gets SIGINT/SIGTERM/SIGHUP (Ctrl-C in a
# terminal). It then kills exactly the server processes it started and
# removes its temporary directory. The same cleanup runs if start-up fails.
# Diagnostics go to stderr only; stdout carries nothing but the lines above.

set -euo pipefail

# A reader that went away must not kill us with SIGPIPE before we clean up:
# with SIGPIPE ignored a failed write is just an error (and set -e exits,
# which runs the EXIT trap below).
trap '' PIPE

readonly PROG="local-cluster"
readonly HOST=127.0.0.1
readonly NUM_NODES=6            # 3 masters + 3 replicas
readonly NUM_MASTERS=3
readonly READY_TIMEOUT=30       # seconds for the cluster to become healthy
readonly START_TIMEOUT=30       # seconds for the processes to accept connections
readonly MAX_PORT_ATTEMPTS=5    # retries if another process grabs our ports

log() { echo "$PROG: $*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
    sed -n '2,47p' "$0" | sed 's/^# \{0,1\}//' >&2
}

# shellcheck source=servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/servers.sh"

# --------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------
standalone=0
tls=0
node_timeout=2000
server_kind=redis
ports=${LOCAL_CLUSTER_PORTS:-}
while [[ $# -gt 0 ]]; do
    case "$1" in
        --standalone) standalone=1 ;;
        --tls) tls=1 ;;
        --node-timeout)
            [[ $# -ge 2 ]] || die "--node-timeout needs a value in milliseconds"
            node_timeout=$2
            shift
            ;;
        --node-timeout=*) node_timeout=${1#*=} ;;
        --server)
            [[ $# -ge 2 ]] || die "--server needs a value: redis or valkey"
            server_kind=$2
            shift
            ;;
        --server=*) server_kind=${1#*=} ;;
        --ports)
            [[ $# -ge 2 ]] || die "--ports needs a value: a base port (7000) or a range (30000-30999)"
            ports=$2
            shift
            ;;
        --ports=*) ports=${1#*=} ;;
        -h | --help) usage; exit 0 ;;
        *) usage; die "unknown option: $1" ;;
    esac
    shift
done
[[ "$node_timeout" =~ ^[0-9]+$ && "$node_timeout" -gt 0 ]] \
    || die "--node-timeout must be a positive number of milliseconds, got '$node_timeout'"
[[ "$server_kind" == redis || "$server_kind" == valkey ]] \
    || die "--server must be redis or valkey, got '$server_kind'"
if ((standalone)); then num_ports=1; else num_ports=$NUM_NODES; fi
# The ports the nodes may use: [port_low, port_high]; a fixed base when equal
# to the base's last port minus the nodes less one. Without --ports: random.
port_low=20000
port_high=$((45000 + num_ports - 1))
fixed_ports=0
if [[ -n "$ports" ]]; then
    if [[ "$ports" =~ ^([0-9]+)$ ]]; then
        port_low=$ports
        port_high=$((ports + num_ports - 1))
        fixed_ports=1
    elif [[ "$ports" =~ ^([0-9]+)-([0-9]+)$ ]]; then
        port_low=${BASH_REMATCH[1]}
        port_high=${BASH_REMATCH[2]}
    else
        die "--ports (or LOCAL_CLUSTER_PORTS) must be a base port (7000) or a range (30000-30999), got '$ports'"
    fi
    ((port_low >= 1024 && port_high <= 55535)) \
        || die "--ports '$ports': the nodes' ports must lie within 1024-55535 (each node's cluster bus is its port + 10000)"
    ((port_high - port_low + 1 >= num_ports)) \
        || die "--ports '$ports' holds $((port_high - port_low + 1)) port(s); $num_ports node(s) need $num_ports"
fi

# --------------------------------------------------------------------------
# Prerequisites
# --------------------------------------------------------------------------
if [[ "$server_kind" == valkey ]]; then
    fetch_valkey
elif ! find_servers; then
    die "no redis-server/redis-cli (nor valkey-server/valkey-cli) on PATH: run \`bash cluster-compose/ensure-redis.sh\` (Redis), \`bash cluster-compose/ensure-redis.sh --valkey\`, or set REDIS_SERVER/REDIS_CLI"
fi
server_desc=$(server_version "$REDIS_SERVER")
server_version "$REDIS_CLI" >/dev/null
if [[ -t 2 ]]; then
    log "server: $server_desc ($REDIS_SERVER)"
fi

# --------------------------------------------------------------------------
# Cleanup: kill exactly the pids we started, then remove the temp dir.
# --------------------------------------------------------------------------
WORKDIR=""
PIDS=()          # pids of the server processes we started
STDIN_PID=""     # pid of the `cat` that waits for EOF on our stdin

stop_nodes() {
    local pid
    for pid in "${PIDS[@]}"; do
        # A test may have paused the node with SIGSTOP: SIGCONT first is
        # harmless, then SIGKILL (we never need the data).
        kill -CONT "$pid" 2>/dev/null || true
        kill -KILL "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    PIDS=()
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    set +e
    if [[ -n "$STDIN_PID" ]]; then
        kill -KILL "$STDIN_PID" 2>/dev/null
        wait "$STDIN_PID" 2>/dev/null
    fi
    local n=${#PIDS[@]}
    stop_nodes
    if [[ -n "$WORKDIR" && -d "$WORKDIR" ]]; then
        rm -rf -- "$WORKDIR"
    fi
    # Only chat about it when a human is watching.
    if [[ -t 2 ]]; then
        log "stopped $n $(basename "$REDIS_SERVER") process(es)${WORKDIR:+, removed $WORKDIR}"
    fi
    exit "$rc"
}
trap cleanup EXIT
# `exit` inside these traps runs the EXIT trap (cleanup) with that status.
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/redis-local-cluster.XXXXXX")

# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

# The CLI's TLS options (--tls): filled in by make_certs.
CLI_TLS=()

# The CLI against one of our nodes, never hanging (coreutils timeout).
rcli() {
    local port=$1
    shift
    timeout 5 "$REDIS_CLI" "${CLI_TLS[@]}" -h "$HOST" -p "$port" "$@" 2>/dev/null
}

# A CA, a server certificate for 127.0.0.1/localhost and a client certificate,
# all signed by the CA, in $WORKDIR/tls. Sets CLI_TLS.
make_certs() {
    command -v openssl >/dev/null 2>&1 || die "--tls needs openssl (apt-get install openssl)"
    local dir="$WORKDIR/tls"
    mkdir -p "$dir"
    {
        openssl req -x509 -new -nodes -newkey rsa:2048 -days 2 -sha256 \
            -subj "/CN=redis-rwlock test CA" \
            -keyout "$dir/ca.key" -out "$dir/ca.crt"
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >"$dir/server.ext"
        openssl req -new -nodes -newkey rsa:2048 -subj "/CN=localhost" \
            -keyout "$dir/server.key" -out "$dir/server.csr"
        openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
            -CAcreateserial -days 2 -sha256 -extfile "$dir/server.ext" -out "$dir/server.crt"
        printf 'extendedKeyUsage=clientAuth\n' >"$dir/client.ext"
        openssl req -new -nodes -newkey rsa:2048 -subj "/CN=redis-rwlock test client" \
            -keyout "$dir/client.key" -out "$dir/client.csr"
        openssl x509 -req -in "$dir/client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
            -CAcreateserial -days 2 -sha256 -extfile "$dir/client.ext" -out "$dir/client.crt"
    } >"$dir/openssl.log" 2>&1 || { tail -n 20 "$dir/openssl.log" >&2; die "openssl could not make the test certificates"; }
    TLS_DIR=$dir
    CLI_TLS=(--tls --cacert "$dir/ca.crt" --cert "$dir/client.crt" --key "$dir/client.key")
}

# Print every local TCP port that is in use (any state), one per line.
used_ports() {
    if command -v ss >/dev/null 2>&1; then
        ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }' | sort -u
    fi
}

# True if something already uses the port (ss view, plus a connect probe in
# case ss is missing or misses a listener).
port_busy() {
    local port=$1 used=$2
    grep -qx "$port" <<<"$used" && return 0
    (exec 3<>"/dev/tcp/$HOST/$port") 2>/dev/null && return 0
    return 1
}

# Choose a random base port within port_low..port_high so that
# base..base+count-1 and the matching cluster bus ports (+10000) are all free.
# Prints the base. With a fixed base (--ports BASE), that one or nothing.
pick_base_port() {
    local count=$1 tries base p used ok
    local bases=$((port_high - port_low - count + 2))
    for ((tries = 0; tries < 200; tries++)); do
        base=$((port_low + (RANDOM * 32768 + RANDOM) % bases))
        used=$(used_ports)
        ok=1
        for ((p = base; p < base + count; p++)); do
            if port_busy "$p" "$used" || port_busy $((p + 10000)) "$used"; then
                ok=0
                break
            fi
        done
        if ((ok)); then
            echo "$base"
            return 0
        fi
        ((fixed_ports == 0)) || return 1
    done
    return 1
}

# Start one server as a background child (not daemonized).
# Usage: start_node PORT [extra redis-server args...]
start_node() {
    local port=$1
    shift
    local dir="$WORKDIR/$port"
    mkdir -p "$dir"
    local listen=(--port "$port")
    if ((tls)); then
        listen=(--port 0 --tls-port "$port" --cluster-port $((port + 10000))
            --tls-cert-file "$TLS_DIR/server.crt" --tls-key-file "$TLS_DIR/server.key"
            --tls-ca-cert-file "$TLS_DIR/ca.crt" --tls-auth-clients optional
            --tls-replication yes)
        ((standalone)) || listen+=(--tls-cluster yes)
    fi
    # stdin is /dev/null for background jobs; stdout/stderr go to the node's
    # log so the node never holds our stdout pipe open.
    "$REDIS_SERVER" \
        "${listen[@]}" \
        --bind "$HOST" \
        --protected-mode no \
        --daemonize no \
        --save '' \
        --appendonly no \
        --dir "$dir" \
        --logfile "$dir/redis.log" \
        "$@" \
        >"$dir/stdout.log" 2>&1 </dev/null &
    PIDS+=("$!")
}

# Wait until every node answers and is really OUR process (INFO server's
# process_id matches), so a port stolen by someone else is noticed.
# Returns 0 when all are up, 2 if a node lost a port race (retry with new
# ports), 1 on any other failure or timeout.
wait_nodes_up() {
    local deadline=$((SECONDS + START_TIMEOUT)) i port pid all_up
    while :; do
        all_up=1
        for i in "${!PORTS[@]}"; do
            port=${PORTS[$i]}
            pid=${PIDS[$i]}
            if ! kill -0 "$pid" 2>/dev/null; then
                if grep -qsi 'address already in use' "$WORKDIR/$port/redis.log" "$WORKDIR/$port/stdout.log"; then
                    log "port $port was taken by someone else meanwhile; retrying with other ports"
                    return 2
                fi
                if ((tls)) && grep -qsi 'tls support\|connection type tls' "$WORKDIR/$port/redis.log"; then
                    log "$server_desc was built without TLS support: --tls needs a build with TLS (Debian's redis-server has it)"
                fi
                log "$server_desc on port $port (pid $pid) exited during start-up; its log:"
                tail -n 20 "$WORKDIR/$port/redis.log" "$WORKDIR/$port/stdout.log" >&2 || true
                return 1
            fi
            if ! rcli "$port" INFO server | tr -d '\r' | grep -qx "process_id:$pid"; then
                all_up=0
            fi
        done
        ((all_up)) && return 0
        if ((SECONDS >= deadline)); then
            log "$server_desc processes did not accept connections within ${START_TIMEOUT}s"
            return 1
        fi
        sleep 0.1
    done
}

# Start NUM processes on fresh ports, retrying on port races.
# Sets PORTS=(...) and PIDS=(...).
start_all() {
    local num=$1
    shift
    local attempt base i rc
    for ((attempt = 1; attempt <= MAX_PORT_ATTEMPTS; attempt++)); do
        base=$(pick_base_port "$num") || die "could not find $num free ports (and bus ports, + 10000) in $port_low-$port_high"
        PORTS=()
        for ((i = 0; i < num; i++)); do
            PORTS+=($((base + i)))
        done
        for port in "${PORTS[@]}"; do
            start_node "$port" "$@"
        done
        rc=0
        wait_nodes_up || rc=$?
        case $rc in
            0) return 0 ;;
            2) stop_nodes ;;           # lost a port race: try other ports
            *) exit 1 ;;
        esac
    done
    die "could not start $server_desc on free ports after $MAX_PORT_ATTEMPTS attempts"
}

# Check once that the cluster is fully formed, as seen from every node:
#  - CLUSTER INFO: cluster_state:ok and cluster_known_nodes:6
#  - CLUSTER NODES: 3 masters owning slots, 3 replicas of those masters,
#    nobody flagged fail/pfail/handshake/noaddr
#  - INFO replication: each master has connected_slaves:1 and each replica
#    has master_link_status:up (the replication link itself is up).
# On success prints "<port> <role>" lines in port order.
cluster_healthy() {
    local port info nodes repl roles="" masters replicas
    for port in "${PORTS[@]}"; do
        info=$(rcli "$port" CLUSTER INFO | tr -d '\r') || return 1
        grep -qx 'cluster_state:ok' <<<"$info" || return 1
        grep -qx "cluster_known_nodes:$NUM_NODES" <<<"$info" || return 1

        nodes=$(rcli "$port" CLUSTER NODES | tr -d '\r') || return 1
        # Fields: id addr flags master-id ping pong epoch link-state slots...
        masters=$(awk '$3 ~ /master/ && NF >= 9' <<<"$nodes" | wc -l)
        replicas=$(awk '$3 ~ /slave/ && $4 != "-"' <<<"$nodes" | wc -l)
        [[ $masters -eq $NUM_MASTERS && $replicas -eq $((NUM_NODES - NUM_MASTERS)) ]] || return 1
        ! grep -qE 'fail|handshake|noaddr' <<<"$(awk '{print $3}' <<<"$nodes")" || return 1

        repl=$(rcli "$port" INFO replication | tr -d '\r') || return 1
        if grep -qx 'role:master' <<<"$repl"; then
            grep -qx 'connected_slaves:1' <<<"$repl" || return 1
            roles+="$port master"$'\n'
        else
            grep -qx 'master_link_status:up' <<<"$repl" || return 1
            roles+="$port replica"$'\n'
        fi
    done
    printf '%s' "$roles"
}

# --------------------------------------------------------------------------
# Start
# --------------------------------------------------------------------------
PORTS=()
scheme=redis
if ((tls)); then
    make_certs
    scheme=rediss
fi
if ((standalone)); then
    start_all 1
    url="$scheme://$HOST:${PORTS[0]}"
    echo "NODE $url ${PIDS[0]} master"
    echo "REDIS_URL=$url"
else
    # repl-diskless-sync-delay 0: replicas sync at once (the default waits
    #   5 s for more replicas to gather before a diskless full sync).
    # cluster-replica-validity-factor 0: a replica may always take over from
    #   a failed master, however long its link was down (tests pause nodes).
    start_all "$NUM_NODES" \
        --cluster-enabled yes \
        --cluster-config-file nodes.conf \
        --cluster-node-timeout "$node_timeout" \
        --cluster-replica-validity-factor 0 \
        --repl-diskless-sync-delay 0

    # Let the CLI assign slots and replicas. Its chatter goes to a log
    # that we show only if it fails.
    addrs=()
    for port in "${PORTS[@]}"; do
        addrs+=("$HOST:$port")
    done
    if ! timeout 60 "$REDIS_CLI" "${CLI_TLS[@]}" --cluster create "${addrs[@]}" \
        --cluster-replicas 1 --cluster-yes >"$WORKDIR/cluster-create.log" 2>&1; then
        log "$(basename "$REDIS_CLI") --cluster create failed:"
        tail -n 30 "$WORKDIR/cluster-create.log" >&2 || true
        exit 1
    fi

    # Poll until the cluster is healthy from every node's point of view.
    deadline=$((SECONDS + READY_TIMEOUT))
    until roles=$(cluster_healthy); do
        if ((SECONDS >= deadline)); then
            log "cluster did not become healthy within ${READY_TIMEOUT}s; node views:"
            for port in "${PORTS[@]}"; do
                echo "--- 127.0.0.1:$port" >&2
                rcli "$port" CLUSTER INFO | grep -E 'cluster_state|known_nodes' >&2 || true
                rcli "$port" CLUSTER NODES >&2 || true
            done
            exit 1
        fi
        sleep 0.2
    done

    urls=()
    for i in "${!PORTS[@]}"; do
        port=${PORTS[$i]}
        role=$(awk -v p="$port" '$1 == p { print $2 }' <<<"$roles")
        echo "NODE $scheme://$HOST:$port ${PIDS[$i]} $role"
        urls+=("$scheme://$HOST:$port")
    done
    (IFS=,; echo "REDIS_CLUSTER_NODES=${urls[*]}")
fi
if ((tls)); then
    echo "TLS_CA=$TLS_DIR/ca.crt"
    echo "TLS_CLIENT_CERT=$TLS_DIR/client.crt"
    echo "TLS_CLIENT_KEY=$TLS_DIR/client.key"
fi
echo "READY"

# --------------------------------------------------------------------------
# Stay up until stdin reaches EOF or a signal arrives.
# `cat` runs in the background so that `wait` can be interrupted by a trapped
# signal at once (a foreground command would delay the trap until it ends).
# Background jobs get /dev/null as stdin unless redirected explicitly, hence
# the explicit <&0. (`2>/dev/null` on wait hides bash's "Killed" notice when
# a test SIGKILLs one of the nodes meanwhile.)
# --------------------------------------------------------------------------
cat <&0 >/dev/null &
STDIN_PID=$!
wait "$STDIN_PID" 2>/dev/null || true
STDIN_PID=""
exit 0
