#!/usr/bin/env python3
"""script_time.py - what Redis pays per acquisition for the crate's function library,
against the original design's scripts, with nothing else on the machine's two cores
but one shard: the profile behind BENCHMARKS.md's "Where the time goes".

    python3 benches/rwlock/script_time.py [--rounds 9] [--pairs 5000]
        [--against DIR ...] [--floor]

Starts a one-shard cluster on free loopback ports (a master holding every slot and
one replica, as the benchmark's masters have; never 7000-7005) and stops exactly
the servers it started. Loads the library composed from `lua/` the way
src/backend/redis/library.rs composes it (and, with `--against DIR`, the one from `DIR/lua`,
e.g. a `git worktree` of an older commit), sends the calls one at a time from one
connection (no pipelining: each call pays its own event-loop turn, as a client's
does) and reads `INFO commandstats` (script time: every FCALL and EVALSHA) and the
main thread's CPU around each block. Rounds alternate the order of the variants.

Modes, one lock each:
  read      acquire_read + release, a fresh token each time
  write     acquire_write + release, likewise
  handover  a writer holds, a second queues behind it, the first releases (handing
            the lock over), the second releases: per hand-over
`--floor` adds a variant of straight-line functions that run only the Redis
commands the fast paths need (TIME, HMGET of the fields read, HSET, PEXPIRE NX or
PTTL, HDEL, the publish), with no decision at all: the least any script keeping
this design's rules (the server's clock, the summaries, the original design's
stamps) can cost. REDIS_SERVER / REDIS_CLI choose the binaries.
"""
import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OPERATIONS = [("acquire_read", []), ("acquire_write", []), ("release", ["allow-oom"]),
              ("renew", []), ("downgrade", []), ("fenced_write", []),
              ("force_release", ["allow-oom"]), ("state", ["no-writes"])]
KEY = "rwlock:{script-time}"
ORIGINAL_KEY = "orig:{script-time}"

# The floor: the commands of the fast read and write acquire and release, nothing else.
FLOOR = {
    "acquire_read": """bind(KEYS, ARGV)
local now = server_time()
local token = ARGV[4]
local v = redis.call('HMGET', KEY, 'r:' .. token, 'rw:' .. token, 'w:owner', 'q:head',
  'u:owner', 'write', 'orig:read', 'read', 'rstamp', 'readers', 'readers_until', 'q:tail',
  'fence')
local d, st = int(now + tonumber(ARGV[5])), int(now)
redis.call('HSET', KEY, 'r:' .. token, d, 'readers', 1, 'readers_until', d, 'read', st,
  'rstamp', st)
redis.call('PEXPIRE', KEY, int(now + tonumber(ARGV[5]) + IDLE), 'NX')
return { 1, 0 }""",
    "acquire_write": """bind(KEYS, ARGV)
local now, now_us = server_time()
local token = ARGV[4]
local v = redis.call('HMGET', KEY, 'w:owner', 'q:head', 'u:owner', 'readers', 'write', 'read',
  'orig:read', 'r:' .. token, 'rw:' .. token, 'fence')
local fence = max((tonumber(v[10]) or 0) + 1, now_us)
local st = int(now)
redis.call('HSET', KEY, 'fence', int(fence), 'w:owner', token, 'w:until',
  int(now + tonumber(ARGV[5])), 'write', st, 'wstamp', st)
redis.call('PTTL', KEY)
return { 1, fence }""",
    "release": """bind(KEYS, ARGV)
local now = server_time()
local token = ARGV[4]
local v = redis.call('HMGET', KEY, 'r:' .. token, 'w:owner', 'w:until', 'rw:' .. token,
  'u:owner', 'orig:read', 'read', 'rstamp', 'write', 'wstamp', 'readers', 'readers_until',
  'readers_gone', 'q:head', 'queue_until', 'wait:' .. token, 'u:upgrade', 'u:wanted')
if v[1] then
  redis.call('HDEL', KEY, 'r:' .. token, 'readers', 'readers_until', 'read', 'rstamp')
else
  redis.call('HDEL', KEY, 'w:owner', 'w:until', 'write', 'wstamp')
  publish('*')
end
return 1""",
}


def read(root, name):
    with open(os.path.join(root, "lua", name), encoding="utf-8") as f:
        return f.read()


def library(root, name, bodies=None):
    """The library text, as src/backend/redis/library.rs composes it (prelude, then one function
    per operation file); `bodies` replaces some operations' files."""
    layout = read(root, "hash_layout.lua") + "\n" + read(root, "fast_path.lua")
    prelude = "\n".join([read(root, "helpers.lua"), layout, read(root, "queue.lua"),
                         read(root, "holds.lua")])
    text = f"#!lua name={name}\n{prelude}\n"
    for operation, flags in OPERATIONS:
        body = (bodies or {}).get(operation) or read(root, operation + ".lua")
        quoted = ", ".join(f"'{flag}'" for flag in flags)
        text += (f"redis.register_function{{function_name='{name}_{operation}', "
                 f"callback=function(KEYS, ARGV)\n{body}\nend, flags={{{quoted}}}}}\n")
    return text


def command(*args):
    out = [f"*{len(args)}\r\n"]
    for arg in args:
        arg = str(arg).encode()
        out.append(f"${len(arg)}\r\n")
        out.append(arg.decode() + "\r\n")
    return "".join(out).encode()


def skip_reply(f):
    line = f.readline()
    kind = line[:1]
    if kind == b"-":
        raise RuntimeError(line.decode().strip())
    if kind == b"$" and int(line[1:]) >= 0:
        f.read(int(line[1:]) + 2)
    elif kind == b"*":
        for _ in range(max(int(line[1:]), 0)):
            skip_reply(f)


def free_port():
    """A port free for the server and for its cluster bus (the port + 10000)."""
    while True:
        port = random.randint(20000, 45000)
        if 7000 <= port <= 7005:
            continue
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue


class Server:
    def __init__(self):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="script-time-")
        self.process = subprocess.Popen(
            [os.environ.get("REDIS_SERVER", "redis-server"), "--port", str(self.port),
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", self.dir,
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.until(lambda: self.cli("PING").strip() == "PONG", "start")

    def cli(self, *args, stdin=None):
        return subprocess.run([os.environ.get("REDIS_CLI", "redis-cli"), "-p", str(self.port),
                               *args], input=stdin, capture_output=True, text=True).stdout

    def until(self, ready, what):
        for _ in range(300):
            if ready():
                return
            time.sleep(0.05)
        raise SystemExit(f"script_time: the server on port {self.port} did not {what}")

    def stop(self):
        self.process.terminate()
        self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def one_shard():
    master, replica = Server(), Server()
    try:
        master.cli("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        replica.cli("CLUSTER", "MEET", "127.0.0.1", str(master.port))
        master_id = master.cli("CLUSTER", "MYID").strip()
        replica.until(lambda: "OK" in replica.cli("CLUSTER", "REPLICATE", master_id),
                      "become a replica")
        master.until(lambda: "connected_slaves:1" in master.cli("INFO", "replication")
                     and "cluster_state:ok" in master.cli("CLUSTER", "INFO"), "get its replica")
        return master, replica
    except BaseException:
        master.stop()
        replica.stop()
        raise


def blocks(name, mode, pairs):
    """The calls of one block, and how many acquisitions (hand-overs) they make."""
    common = ["SPUBLISH", 10000, 10000]
    calls = []
    for _ in range(pairs):
        token = "%032x" % random.getrandbits(128)
        if name is None:  # the original design
            stamp = str(int(time.time() * 1000))
            script = "acquire_read" if mode == "read" else "acquire_write"
            calls.append(("EVALSHA", script, 1, ORIGINAL_KEY, 30000, 10000, 10000, stamp))
            calls.append(("EVALSHA", "release", 1, ORIGINAL_KEY, mode, stamp))
        elif mode == "read":
            calls.append(("FCALL", f"{name}_acquire_read", 1, KEY, *common, token, 10000, 1, 0, 0))
            calls.append(("FCALL", f"{name}_release", 1, KEY, *common, token))
        elif mode == "write":
            calls.append(("FCALL", f"{name}_acquire_write", 1, KEY, *common, token, 10000, 0, 0))
            calls.append(("FCALL", f"{name}_release", 1, KEY, *common, token))
        else:
            second = "%032x" % random.getrandbits(128)
            calls.append(("FCALL", f"{name}_acquire_write", 1, KEY, *common, token, 10000, 5000, 0))
            calls.append(("FCALL", f"{name}_acquire_write", 1, KEY, *common, second, 10000, 5000, 0))
            calls.append(("FCALL", f"{name}_release", 1, KEY, *common, token))
            calls.append(("FCALL", f"{name}_release", 1, KEY, *common, second))
    return calls


def measure(master, shas, calls, pairs):
    """Script time and main-thread CPU per acquisition (us) of one block."""
    def cpu():
        used = 0.0
        for line in master.cli("INFO", "cpu").splitlines():
            if line.startswith(("used_cpu_user_main_thread", "used_cpu_sys_main_thread")):
                used += float(line.split(":")[1])
        return used

    master.cli("DEL", KEY, ORIGINAL_KEY)
    master.cli("CONFIG", "RESETSTAT")
    encoded = [command(*(c[:1] + (shas.get(c[1], c[1]),) + c[2:])) for c in calls]
    before = cpu()
    with socket.create_connection(("127.0.0.1", master.port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        replies = sock.makefile("rb")
        for call in encoded:
            sock.sendall(call)
            skip_reply(replies)
    used = (cpu() - before) * 1e6
    usec = 0
    for line in master.cli("INFO", "commandstats").splitlines():
        if line.startswith(("cmdstat_fcall:", "cmdstat_evalsha:")):
            usec += int(line.split("usec=")[1].split(",")[0])
    return usec / pairs, used / pairs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--pairs", type=int, default=5000)
    parser.add_argument("--against", action="append", default=[], metavar="DIR")
    parser.add_argument("--floor", action="store_true")
    parser.add_argument("--modes", default="read,write,handover")
    args = parser.parse_args()

    master, replica = one_shard()
    try:
        variants = [("this tree", "lib0", library(ROOT, "lib0"))]
        for i, other in enumerate(args.against, 1):
            variants.append((other, f"lib{i}", library(os.path.abspath(other), f"lib{i}")))
        if args.floor:
            variants.append(("floor (commands only)", "floor", library(ROOT, "floor", FLOOR)))
        for _, name, text in variants:
            out = master.cli("-x", "FUNCTION", "LOAD", stdin=text)
            if name not in out:
                raise SystemExit(f"script_time: FUNCTION LOAD {name}: {out.strip()}")
        shas = {}
        for script in ["acquire_read", "acquire_write", "release"]:
            with open(os.path.join(ROOT, "tests", "original", f"hash_{script}.lua"),
                      encoding="utf-8") as f:
                shas[script] = master.cli("SCRIPT", "LOAD", f.read()).strip()

        print(f"{master.cli('INFO', 'server').split('redis_version:')[1].split()[0]}, "
              f"one master and one replica, {args.rounds} rounds of {args.pairs} "
              "acquisitions per cell; median (min-max), us per acquisition")
        for mode in args.modes.split(","):
            cells = [("original design", None)] if mode != "handover" else []
            cells += [(label, name) for label, name, _ in variants
                      if not (name == "floor" and mode == "handover")]
            results = {label: [] for label, _ in cells}
            for r in range(args.rounds):
                for label, name in (cells if r % 2 == 0 else cells[::-1]):
                    calls = blocks(name, mode, args.pairs)
                    results[label].append(measure(master, shas, calls, args.pairs))
            base = results.get("original design")
            print(f"\n{mode}:")
            print("| variant | script time | vs original | main-thread CPU | vs original |")
            print("|---|---|---|---|---|")
            for label, _ in cells:
                row = [f"| {label} "]
                for i in (0, 1):
                    values = [x[i] for x in results[label]]
                    median = statistics.median(values)
                    row.append(f"| {median:.2f} ({min(values):.2f}-{max(values):.2f}) ")
                    if base:
                        ratio = median / statistics.median(x[i] for x in base)
                        row.append(f"| {ratio:.2f}x ")
                    else:
                        row.append("| - ")
                print("".join(row) + "|")
    finally:
        master.stop()
        replica.stop()


if __name__ == "__main__":
    main()
