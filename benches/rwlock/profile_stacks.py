#!/usr/bin/env python3
"""profile_stacks.py - sorts a `perf record --call-graph dwarf` profile of a Redis
master into what the server does for one kind of script call, as a markdown table.

    python3 benches/rwlock/profile_stacks.py perf.data [fcall|evalsha] [calls]

Only the samples whose stack holds the command's handler count (FCALL:
`fcallCommandGeneric`; EVALSHA: `evalGenericCommand`, as EVAL). `calls`, when given, is how many
such calls ran while perf recorded (INFO commandstats), for a microseconds-per-call
column. Needs a redis-server with symbols (a build from source; Debian's is
stripped). benches/rwlock/profile.sh runs it; BENCHMARKS.md explains the rows.
"""

import collections
import re
import subprocess
import sys

HANDLER = {"fcall": "fcallCommandGeneric", "evalsha": "evalGenericCommand"}

# The Lua functions that build and grow tables, and the interpreter's own loop.
TABLES = {"luaH_new", "luaH_resize", "resize", "newkey", "luaH_set", "luaH_setnum",
          "luaH_setstr", "setarrayvector", "luaM_realloc_"}

# Functions `call` runs around a command's handler, also named "...Command".
NOT_HANDLERS = {"lookupCommand", "afterCommand", "slowlogPushCurrentCommand"}


def stacks(path):
    """Each sample's frames, innermost first, as bare function names."""
    text = subprocess.run(["perf", "script", "-i", path, "-F", "period,ip,sym"],
                          capture_output=True, text=True, check=True).stdout
    current = []
    for line in text.split("\n"):
        if not line.strip():
            if current:
                yield current
            current = []
        elif line.startswith("\t"):  # a frame: address, then the function
            parts = line.split(None, 1)
            if len(parts) == 2:
                current.append(parts[1].split("+")[0].replace(" (inlined)", ""))
    if current:
        yield current


def category(names):
    """Where a sample of a script call goes (names: innermost first)."""
    has = set(names).__contains__
    if has("luaRedisGenericCommand"):
        if has("scriptCall"):
            inner = names[: names.index("scriptCall")]
            # The command's handler is the frame `call` runs.
            if "call" in inner and inner.index("call") > 0:
                handler = inner[inner.index("call") - 1]
                if handler.endswith("Command") and handler not in NOT_HANDLERS:
                    return "redis.call: the command itself (%s)" % handler
            return "redis.call: ACL, cluster and replication checks, stats"
        if has("redisProtocolToLuaType") or has("parseReply"):
            return "redis.call: its reply turned into Lua values"
        if has("luaArgsToRedisArgv"):
            return "redis.call: Lua arguments turned into Redis strings"
        return "redis.call: the rest"
    if has("luaC_step") or has("lua_gc") or has("luaC_fullgc"):
        return "Lua garbage collection"
    if has("lua_pcall"):
        if any(n in TABLES for n in names[:3]):
            return "Lua: creating and growing tables"
        if any(n.startswith(("luaB_", "str_", "math_")) for n in names[:4]):
            return "Lua: library functions (tonumber, string.format, unpack...)"
        return "Lua: the interpreter running the script's code"
    if has("luaCallFunction"):
        return "the call's set-up: KEYS and ARGV as Lua tables, the reply"
    return "dispatch around the script (lookup, flags, propagation)"


def main():
    path = sys.argv[1]
    kind = sys.argv[2] if len(sys.argv) > 2 else "fcall"
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    handler = HANDLER[kind]
    counts, total = collections.Counter(), 0
    for names in stacks(path):
        if handler in names:
            total += 1
            counts[category(names)] += 1
    if not total:
        sys.exit("no %s samples in %s (a stripped redis-server?)" % (kind.upper(), path))
    freq = perf_frequency(path)
    per_call = calls and freq
    header = "| where the time of a %s call goes | share |" % kind.upper()
    rule = "|---|---|"
    if per_call:
        header += " us per call (under perf) |"
        rule += "---|"
    print(header)
    print(rule)
    for name, n in counts.most_common():
        row = "| %s | %.1f%% |" % (name, 100.0 * n / total)
        if per_call:
            row += " %.2f |" % (n / freq / calls * 1e6)
        print(row)
    row = "| all (%d samples) | 100%% |" % total
    if per_call:
        row += " %.2f |" % (total / freq / calls * 1e6)
    print(row)


def perf_frequency(path):
    """The sampling frequency perf recorded with (Hz), or 0 when unknown."""
    header = subprocess.run(["perf", "report", "-i", path, "--header-only"],
                            capture_output=True, text=True).stdout
    found = re.search(r"sample_freq \} = (\d+)", header)
    return int(found.group(1)) if found else 0


if __name__ == "__main__":
    main()
