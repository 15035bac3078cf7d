-- prelude.lua: shared by every script; the crate prepends it (and, for the legacy
-- two-key mode, legacy.lua after it) to each operation file before loading, so all
-- scripts read and tidy the lock the same way.
--
-- Our state is ONE hash, KEYS[1] (docs/DECISIONS.md, "State"):
--   w:owner    token of the writer;  w:until  its lease deadline (ms)
--   r:<token>  lease deadline (ms) of one reader
--   wait:<token>  "<seq>:<deadline>" a queued writer (arrival order = seq)
--   wseq       last queue sequence number
--   fence      last fencing token issued: max(fence + 1, server time in microseconds),
--              so tokens keep rising after the key expired and was recreated
--   readers    how many `r:` fields there are (live or not yet purged); absent: none
--   queue_until  the latest deadline among the `wait:` fields; absent: none
-- These two let the common paths (`quick` below) decide in constant time however
-- many readers hold: a writer queues while `queue_until` is in the future.
-- What clients of the original design see is kept by `layout` below. In the hash
-- layout it lives in the same hash:
--   write      ms  server time of our writer's acquire/renewal, or an original client's stamp
--   wstamp     ms  the `write` value we wrote last (a different `write` came from an original client)
--   read       ms  server time of the latest reader acquire/renewal
--   rstamp     ms  the `read` value we wrote last (a different `read` came from an original client)
--   orig:read  ms  deadline of an original reader whose `read` stamp we overwrote
--
-- Common ARGV of every script:
--   ARGV[1] publish command ('SPUBLISH' on a cluster, 'PUBLISH' on a standalone server)
--   ARGV[2] lease (ms) an original-design reader holds after its stamp
--   ARGV[3] lease (ms) an original-design writer holds after its stamp
-- Operation arguments start at ARGV[4]; keys of the caller's own (fenced writes)
-- start at KEYS[FIRST_USER_KEY].

local KEY = KEYS[1]
local CHANNEL = KEY .. ':released'
local PUBLISH = ARGV[1]
local ORIGINAL_READ = tonumber(ARGV[2])
local ORIGINAL_WRITE = tonumber(ARGV[3])
local FIRST_USER_KEY = 2
-- How long (ms) a key outlives its last deadline: an idle lock keeps its fencing
-- counter that much longer, then disappears.
local IDLE = 1000

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

-- Stores `readers` (a zero count is no field).
local function count_readers(n)
  if n > 0 then
    redis.call('HSET', KEY, 'readers', n)
  else
    redis.call('HDEL', KEY, 'readers')
  end
end

-- The latest deadline among the queued writers (0: none).
local function latest_intent(s)
  local t = 0
  for _, intent in ipairs(s.intents) do
    t = math.max(t, intent.deadline)
  end
  return t
end

-- Stores `queue_until` after the queue changed (no field while nobody queues).
local function mark_queue(s)
  local t = latest_intent(s)
  if t > 0 then
    redis.call('HSET', KEY, 'queue_until', int(t))
  else
    redis.call('HDEL', KEY, 'queue_until')
  end
end

-- How the lock shows itself to clients of the original design: the `read`/`write`
-- stamps of the hash. legacy.lua replaces these with the two-key layout.
local layout = {}
-- Whether the constant-time paths (`quick`) apply: they keep the stamps of this layout.
layout.quick = true

-- Finds the original clients' holds: sets s.original_writer_until and
-- s.original_reader_until (deadlines, or nil) and lists stale fields in `stale`.
-- An original client holds while `now - stamp <= its timeout`, so the deadlines
-- are inclusive.
function layout.original_holds(s, h, stale)
  -- `write` is ours while it equals `wstamp`; another value is an original writer's
  -- stamp (also when our writer's lease ran out and an original writer came next).
  if h['write'] and h['write'] ~= h['wstamp'] then
    local deadline = tonumber(h['write']) + ORIGINAL_WRITE
    if deadline >= s.now then
      s.original_writer_until = deadline
    else
      stale[#stale + 1] = 'write'
      s.freed = true
    end
  end
  -- Original readers: a `read` stamp we did not write, or one we overwrote.
  local reader_until = tonumber(h['orig:read'] or '0')
  if h['read'] and h['read'] ~= h['rstamp'] then
    reader_until = math.max(reader_until, tonumber(h['read']) + ORIGINAL_READ)
  end
  if reader_until > 0 and reader_until >= s.now then
    s.original_reader_until = reader_until
  else
    if h['orig:read'] then
      stale[#stale + 1] = 'orig:read'
    end
    if h['read'] and s.nreaders == 0 then
      stale[#stale + 1] = 'read'
      stale[#stale + 1] = 'rstamp'
    end
  end
end

-- Our readers hold (acquired or renewed): writes `field`/`value` (the reader's
-- own entry) and shows the hold, keeping an original reader's deadline.
function layout.stamp_read(s, field, value)
  if s.original_reader_until then
    redis.call('HSET', KEY, field, value, 'read', int(s.now), 'rstamp', int(s.now),
      'orig:read', int(s.original_reader_until))
  else
    redis.call('HSET', KEY, field, value, 'read', int(s.now), 'rstamp', int(s.now))
  end
end

-- Our last reader left.
function layout.clear_read(s)
  if not s.original_reader_until then
    redis.call('HDEL', KEY, 'read', 'rstamp')
  end
end

-- Our writer holds (acquired or renewed): writes its owner and deadline and shows
-- the hold.
function layout.stamp_write(s)
  redis.call('HSET', KEY, 'w:owner', s.writer, 'w:until', int(s.writer_until),
    'write', int(s.now), 'wstamp', int(s.now))
end

-- Our writer left (released, expired or downgraded): its stamp goes, unless an
-- original writer's stamp replaced it.
function layout.clear_write(s)
  if s.h['write'] == s.h['wstamp'] then
    redis.call('HDEL', KEY, 'write', 'wstamp')
  end
end

-- Every hold ends (force release): original clients' too.
function layout.clear_all(s)
  redis.call('HDEL', KEY, 'write', 'wstamp', 'read', 'rstamp', 'orig:read')
end

-- Reads the state, deletes every expired entry and returns the live state; with
-- `readonly`, only reads (state.lua: the live state is the same, the expired entries
-- stay for the next script to purge). An error (WRONGTYPE) is raised before anything
-- is written.
local function load(readonly)
  local now, now_us = server_time()
  local flat = redis.call('HGETALL', KEY)
  local h = {}
  local s = { now = now, now_us = now_us, readers = {}, nreaders = 0, intents = {}, freed = false,
              freed_writer = false, dequeued = false, h = h }
  local stale = {}

  -- One pass: readers (`r:<token>`) and queued writers (`wait:<token>`) by prefix,
  -- every field into `h` for the named ones.
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    h[field] = value
    if string.byte(field, 2) == 58 and string.byte(field, 1) == 114 then -- 'r:'
      local deadline = tonumber(value)
      if deadline > now then
        s.readers[string.sub(field, 3)] = deadline
        s.nreaders = s.nreaders + 1
      else
        stale[#stale + 1] = field
        s.freed = true
      end
    elseif string.sub(field, 1, 5) == 'wait:' then
      local colon = string.find(value, ':', 1, true)
      local deadline = colon and tonumber(string.sub(value, colon + 1))
      if deadline and deadline > now then
        s.intents[#s.intents + 1] = { token = string.sub(field, 6),
          seq = tonumber(string.sub(value, 1, colon - 1)), deadline = deadline }
      else
        stale[#stale + 1] = field
        s.dequeued = true
      end
    end
  end
  if #s.intents > 1 then
    table.sort(s.intents, function(a, b) return a.seq < b.seq end)
  end
  s.fence = tonumber(h['fence'] or '0')

  local expired_writer = false
  if h['w:owner'] then
    local deadline = tonumber(h['w:until'] or '0')
    if deadline > now then
      s.writer, s.writer_until = h['w:owner'], deadline
    else
      stale[#stale + 1] = 'w:owner'
      stale[#stale + 1] = 'w:until'
      s.freed, s.freed_writer, expired_writer = true, true, true
    end
  end
  layout.original_holds(s, h, stale)

  if readonly then
    return s
  end
  if #stale > 0 then
    redis.call('HDEL', KEY, unpack(stale))
  end
  if expired_writer then
    layout.clear_write(s)
  end
  if s.nreaders ~= tonumber(h['readers'] or '0') then
    count_readers(s.nreaders)
  end
  if latest_intent(s) ~= tonumber(h['queue_until'] or '0') then
    mark_queue(s)
  end
  return s
end

-- The constant-time start of an acquire or a release: reads only the named
-- fields. Returns nil in the legacy layout or when original-design clients left a
-- trace (a `write` stamp not ours, `orig:read`, a `read` stamp not ours): then the
-- script takes the full path. Otherwise returns the writer's token and deadline (if
-- any), `queue_until` (nil: nobody queues), the count of `r:` fields, the deadline
-- of `token`'s read hold (nil: none), whether a `read` stamp is there, the fence, and
-- how many fields it found (compared with HLEN, it tells whether any other field
-- exists).
local function quick(token)
  if not layout.quick then
    return nil
  end
  local v = redis.call('HMGET', KEY, 'write', 'wstamp', 'orig:read', 'read', 'rstamp',
    'w:owner', 'w:until', 'queue_until', 'readers', 'r:' .. token, 'fence', 'wseq')
  if v[1] ~= v[2] or v[3] or v[4] ~= v[5] then
    return nil
  end
  local found = 0
  for i = 1, #v do
    if v[i] then
      found = found + 1
    end
  end
  return { writer = v[6] or nil, writer_until = tonumber(v[7] or '0'),
           queue_until = v[8] and tonumber(v[8]) or nil, readers = tonumber(v[9] or '0'),
           mine = v[10] and tonumber(v[10]) or nil, read_stamp = v[4] ~= false,
           fence = tonumber(v[11] or '0'), found = found }
end

-- True when, besides what `q` shows, the hash has no reader, queue or stamp of one
-- and no field it did not read: a writer's acquire or release can decide alone.
local function no_readers_nor_queue(q)
  return q.readers == 0 and not q.mine and not q.read_stamp and not q.queue_until
    and redis.call('HLEN', KEY) == q.found
end

-- Makes the key outlive a hold of `lease` ms from now by at least IDLE / 2: when it
-- would not, sets its TTL to lease + IDLE (so most calls in a row leave it alone).
-- Never shortens it. `created`: the key did not exist before this script.
local function outlive(lease, created)
  if created or redis.call('PTTL', KEY) < lease + IDLE / 2 then
    redis.call('PEXPIRE', KEY, int(lease + IDLE))
  end
end

-- True when an original-design client holds in a mode that conflicts with our hold
-- in mode `write` (true: write, false: read). It can only have entered after judging
-- our stamp stale, so our hold no longer excludes it: renewals and fenced writes
-- report the hold lost instead of going on beside it.
local function original_beside(s, write)
  return s.original_writer_until ~= nil or (write and s.original_reader_until ~= nil)
end

-- True when neither our holders nor an original client's hold the lock.
local function is_free(s)
  return not s.writer and not s.original_writer_until and s.nreaders == 0
    and not s.original_reader_until
end

-- The latest deadline among the holds: when the lock frees itself if nobody renews.
local function holds_until(s)
  local t = math.max(s.writer_until or 0, s.original_writer_until or 0,
    s.original_reader_until or 0)
  for _, deadline in pairs(s.readers) do
    t = math.max(t, deadline)
  end
  return t
end

-- Milliseconds a refused caller may sleep before the holds could have expired.
local function retry_hint(s)
  return math.max(holds_until(s) - s.now, 1)
end

-- Milliseconds a reader that only the writers' queue keeps out may sleep before the
-- queued places could have lapsed.
local function queue_hint(s)
  return math.max(latest_intent(s) - s.now, 1)
end

-- The hash lives IDLE ms longer than its longest deadline.
local function set_expiry(s)
  local t = math.max(holds_until(s), latest_intent(s))
  redis.call('PEXPIRE', KEY, int(math.max(t - s.now, 0) + IDLE))
end

-- Grants (or renews) a read hold of `lease` ms to `token`.
local function hold_read(s, token, lease)
  if not s.readers[token] then
    s.nreaders = s.nreaders + 1
    count_readers(s.nreaders)
  end
  s.readers[token] = s.now + lease
  layout.stamp_read(s, 'r:' .. token, int(s.now + lease))
end

-- Grants (or renews) the write hold of `lease` ms to `token`.
local function hold_write(s, token, lease)
  s.writer, s.writer_until = token, s.now + lease
  layout.stamp_write(s)
end

-- Removes one reader; the read stamp goes with the last one unless an original
-- reader holds.
local function drop_reader(s, token)
  redis.call('HDEL', KEY, 'r:' .. token)
  s.readers[token] = nil
  s.nreaders = s.nreaders - 1
  count_readers(s.nreaders)
  if s.nreaders == 0 then
    layout.clear_read(s)
  end
  s.freed = true
end

local function drop_writer(s)
  redis.call('HDEL', KEY, 'w:owner', 'w:until')
  layout.clear_write(s)
  s.writer, s.writer_until = nil, nil
  s.freed, s.freed_writer = true, true
end

-- Takes `token` out of the writers' queue; false when it was not queued.
local function drop_intent(s, token)
  for i, intent in ipairs(s.intents) do
    if intent.token == token then
      table.remove(s.intents, i)
      redis.call('HDEL', KEY, 'wait:' .. token)
      mark_queue(s)
      s.dequeued = true
      return true
    end
  end
  return false
end

-- Wakes who can proceed after holds ended or queued writers left (withdrawn or
-- lapsed): the first queued writer, or everyone ('*') when no writer queues, if the
-- lock is free; the readers ('r') when no writer holds any more and either a writer
-- left or the queue that kept them out (writer preference) is now empty.
local function wake(s)
  if not (s.freed or s.dequeued) then
    return
  end
  if is_free(s) then
    local first = s.intents[1]
    redis.call(PUBLISH, CHANNEL, first and first.token or '*')
  elseif not s.writer and not s.original_writer_until
    and (s.freed_writer or (s.dequeued and #s.intents == 0)) then
    redis.call(PUBLISH, CHANNEL, 'r')
  end
end
