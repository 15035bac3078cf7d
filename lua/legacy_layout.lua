-- legacy_layout.lua: the two-key layout of the original single-instance design, in
-- place of hash_layout.lua's `read`/`write` stamps (docs/ORIGINAL_DESIGN.md). These
-- scripts always run as EVAL scripts (never in the function library), so the keys
-- are read at load time.
--
-- KEYS[1]  our state hash `{tag}:rwlock:legacy` (tokens, deadlines, queue, fence),
--          where tag is the read key's hash tag, so it shares the read key's slot
-- KEYS[2]  the read key: exists while anyone reads
-- KEYS[3]  the write key: exists while anyone writes
-- Original clients only test EXISTS on the other mode's key, set their own key with
-- an expiry, and delete it when done. We keep both keys true for them:
--   read key  = 'rwlock', expiring with our last reader (or an original reader we
--               saw, whose deadline we keep in the hash as `orig:read`);
--   write key = our writer's token, expiring with its lease.
-- An original client's value ('1', or anything not ours) counts as its hold until
-- the key expires.

local READ_KEY, WRITE_KEY = KEYS[2], KEYS[3]
local MARK = 'rwlock'
FIRST_USER_KEY = 4

layout.fields = { 'orig:read' }

-- No fast paths: every operation goes the full way (the keys' expiries are the
-- state original clients see, read on every call).
function layout.fast_path()
  return nil
end

-- When a key expires in ms (now + PTTL); a key without expiry counts `fallback` ms.
local function key_deadline(s, key, fallback)
  local ttl = redis.call('PTTL', key)
  if ttl == -2 then
    return nil
  elseif ttl < 0 then
    return s.now + fallback
  end
  return s.now + ttl
end

-- Both keys must be strings (or absent); say which one is not, before any write.
local function string_or_none(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'none' and kind ~= 'string' then
    error({ err = 'WRONGTYPE ' .. key .. ' holds a ' .. kind .. ', not a string' })
  end
end

function layout.original_holds(s, h)
  string_or_none(READ_KEY)
  string_or_none(WRITE_KEY)
  -- Our own writer's key (live or just expired) is not an original client's.
  local writer = redis.call('GET', WRITE_KEY)
  if writer and writer ~= h['w:owner'] then
    s.original_writer_until = key_deadline(s, WRITE_KEY, ORIGINAL_WRITE)
  end
  -- Original readers: the read key with their value, or our mark over an original
  -- reader's hold we saw. An absent read key means their readers are gone: their
  -- release deletes it for all of them.
  local reader = redis.call('GET', READ_KEY)
  local reader_until = 0
  if reader == MARK then
    reader_until = tonumber(h['orig:read']) or 0
  elseif reader then
    reader_until = max(tonumber(h['orig:read']) or 0,
      key_deadline(s, READ_KEY, ORIGINAL_READ) or 0)
  end
  if reader_until > s.now then
    s.original_reader_until = reader_until
  elseif h['orig:read'] then
    del(s, 'orig:read')
  end
end

-- The read key lives until the last known reader's deadline.
local function show_readers(s)
  local t = s.original_reader_until or 0
  if s.nreaders > 0 then
    t = max(t, s.readers_until)
  end
  if t > s.now then
    redis.call('SET', READ_KEY, MARK, 'PX', int(t - s.now))
  else
    redis.call('DEL', READ_KEY)
  end
end

function layout.stamp_read(s)
  if s.original_reader_until then
    set(s, 'orig:read', int(s.original_reader_until))
  end
  show_readers(s)
end

function layout.clear_read(s)
  show_readers(s)
end

function layout.stamp_write(s)
  set(s, 'w:owner', s.writer)
  set(s, 'w:until', int(s.writer_until))
  redis.call('SET', WRITE_KEY, s.writer, 'PX', int(s.writer_until - s.now))
end

function layout.clear_write(s)
  -- Only our own writer's key: an original writer's key is its hold.
  local value = redis.call('GET', WRITE_KEY)
  if value and value == s.h['w:owner'] then
    redis.call('DEL', WRITE_KEY)
  end
end

function layout.clear_all(s)
  redis.call('DEL', READ_KEY, WRITE_KEY)
  del(s, 'orig:read')
end
