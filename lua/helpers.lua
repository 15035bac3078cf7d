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

-- The call's context, set by `bind`.
local KEY, CHANNEL, PUBLISH, ORIGINAL_READ, ORIGINAL_WRITE
-- Set by the layout's hooks (the legacy layout has two more keys).
local FIRST_USER_KEY = 2
-- How long (ms) a key outlives its last deadline: an idle lock keeps its fencing
-- counter that much longer, then disappears.
local IDLE = 1000

local function bind(keys, argv)
  KEY = keys[1]
  CHANNEL = KEY .. ':released'
  PUBLISH = argv[1]
  ORIGINAL_READ = tonumber(argv[2])
  ORIGINAL_WRITE = tonumber(argv[3])
end

-- Integers as exact decimal strings (Lua prints large doubles as 1.7e+15).
local function int(n)
  return string.format('%d', n)
end

-- The server's clock in milliseconds and in microseconds.
local function server_time()
  local t = redis.call('TIME')
  local micros = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.floor(micros / 1000), micros
end

-- A script collects its changes to the hash in `s.changes` (field -> new value, or
-- false: deleted) and writes them with one HDEL and one HSET at the end (`flush`).
local function set(s, field, value)
  s.changes[field] = value
end

local function del(s, field)
  s.changes[field] = false
end

-- The fields `names`, as this script has left them so far.
local function fields(s, names)
  local v = redis.call('HMGET', KEY, unpack(names))
  local out = {}
  for i, name in ipairs(names) do
    local changed = s.changes[name]
    if changed ~= nil then
      out[i] = changed or nil
    else
      out[i] = v[i] or nil
    end
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

-- The layout's hooks: how the lock shows itself to clients of the original design
-- (hash_layout.lua or legacy_layout.lua fills this in).
local layout = {}
