-- helpers.lua: the first part of every script (see src/scripts.rs for the order:
-- helpers, one layout's hooks, queue, holds, then the operation). Nothing here runs
-- at load time but definitions, so the same text serves as the head of an EVAL
-- script and of a function library; each operation starts with `bind(KEYS, ARGV)`.
--
-- Common ARGV of every script:
--   ARGV[1] publish command ('SPUBLISH' on a cluster, 'PUBLISH' on a standalone server)
--   ARGV[2] lease (ms) an original-design reader holds after its stamp
--   ARGV[3] lease (ms) an original-design writer holds after its stamp
-- Operation arguments start at ARGV[4]; keys of the caller's own (fenced writes)
-- start at KEYS[FIRST_USER_KEY].

-- The standard functions the scripts use, as locals: a global is two table lookups
-- at every use (a function's globals table passes misses on to the real one), a
-- local (an upvalue of the functions below) none. A function library sees no
-- standard function while it loads, so `bind` takes them at the first call.
local function standard()
  return tonumber, unpack, pairs, ipairs, string.format, string.find, string.sub, math.max,
    math.min, math.floor
end
local tonumber, unpack, pairs, ipairs, format, find, sub, max, min, floor

-- The call's context, set by `bind`. The original clients' timeouts stay the
-- decimal strings ARGV gives (Lua converts one where it is added to a number):
-- most calls never look at them.
local KEY, PUBLISH, ORIGINAL_READ, ORIGINAL_WRITE
-- Set by the layout's hooks (the legacy layout has two more keys).
local FIRST_USER_KEY = 2
-- How long (ms) a key outlives its last deadline: an idle lock keeps its fencing
-- counter that much longer, then disappears.
local IDLE = 1000

local function bind(keys, argv)
  if not tonumber then
    tonumber, unpack, pairs, ipairs, format, find, sub, max, min, floor = standard()
  end
  KEY = keys[1]
  PUBLISH = argv[1]
  ORIGINAL_READ = argv[2]
  ORIGINAL_WRITE = argv[3]
end

-- Tells the lock's waiters `message` on its channel (see src/wakeups.rs for what
-- each message means to whom).
local function publish(message)
  redis.call(PUBLISH, KEY .. ':released', message)
end

-- A place, "<deadline>:<first lease>", as two numbers; a reader's `rw:` field,
-- "<batch>:<deadline>", as its batch's name and a number.
local function parse_place(value)
  local colon = find(value, ':', 1, true)
  local first = sub(value, 1, colon - 1)
  return tonumber(first) or first, tonumber(sub(value, colon + 1))
end

-- The `layout` field's value while a line exists (queue.lua): over 64 bytes long.
local LINE_MARK = 'a line of waiters formed: a value over 64 bytes keeps this hash a hashtable'

-- Integers as exact decimal strings (Lua prints large doubles as 1.7e+15).
local function int(n)
  return format('%d', n)
end

-- The server's clock in milliseconds and in microseconds.
local function server_time()
  local t = redis.call('TIME')
  local micros = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return floor(micros / 1000), micros
end

-- A script collects its changes to the hash in `s.changes` (field -> new value, or
-- false: deleted) and writes them with one HDEL and one HSET at the end (`flush`).
local function set(s, field, value)
  s.changes[field] = value
end

local function del(s, field)
  s.changes[field] = false
end

-- The fields `names`, as this script has left them so far. Each field is asked of
-- the server once per script: what one lookup brought (present or not) is kept in
-- `s.known`, and the fields still unknown go in one HMGET.
local function fields(s, names)
  local unknown = {}
  for _, name in ipairs(names) do
    if s.changes[name] == nil and s.known[name] == nil then
      unknown[#unknown + 1] = name
    end
  end
  if #unknown > 0 then
    local v = redis.call('HMGET', KEY, unpack(unknown))
    for i, name in ipairs(unknown) do
      s.known[name] = v[i]
    end
  end
  local out = {}
  for i, name in ipairs(names) do
    local value = s.changes[name]
    if value == nil then
      value = s.known[name]
    end
    out[i] = value or nil
  end
  return out
end

-- Writes the collected changes.
local function flush(s)
  local deleted, written = {}, {}
  for field, value in pairs(s.changes) do
    if value then
      written[#written + 1] = field
      written[#written + 1] = value
    else
      deleted[#deleted + 1] = field
    end
  end
  if #deleted > 0 then
    redis.call('HDEL', KEY, unpack(deleted))
  end
  if #written > 0 then
    redis.call('HSET', KEY, unpack(written))
  end
end

-- Keeps the key alive at least IDLE / 2 ms past its longest deadline, `needed` ms
-- from now: when it would not be, its TTL becomes that deadline + IDLE. `PTTL` reads
-- without a write to replicate, so most grants in a row leave the TTL alone; it is
-- never shortened. `new`: the caller saw no field that outlives a hold, so the key
-- most likely was just created, without a TTL: `PEXPIRE NX` sets it in one call
-- where it has none, and changes nothing (then `PTTL` decides) where it has one.
local function keep_alive(needed, new)
  if new and redis.call('PEXPIRE', KEY, int(needed + IDLE), 'NX') == 1 then
    return
  end
  if redis.call('PTTL', KEY) < needed + IDLE / 2 then
    redis.call('PEXPIRE', KEY, int(needed + IDLE))
  end
end

-- The layout's hooks: how the lock shows itself to clients of the original design
-- (hash_layout.lua or legacy_layout.lua fills this in).
local layout = {}
