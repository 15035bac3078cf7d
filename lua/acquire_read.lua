-- acquire_read.lua: take a read lease, or say how long the holds may last.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see prelude.lua)
-- ARGV[4]  token of this acquisition (128 random bits, hex)
-- ARGV[5]  read lease (ms)
-- ARGV[6]  '1' when queued writers keep new readers out (writer preference), else '0'
-- Returns {1, 0} granted (also when this token already holds: a resent command),
--         {0, ms} refused; ms = time until the current holds end unless renewed.
local token, lease, writer_preferred = ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1'

-- Only our readers (or nobody) hold: join them without reading the others.
local q = quick(token, writer_preferred)
if q then
  local now = server_time()
  if q.mine then
    redis.call('HSET', KEY, 'r:' .. token, int(now + lease), 'read', int(now), 'rstamp', int(now))
  else
    redis.call('HSET', KEY, 'r:' .. token, int(now + lease), 'read', int(now), 'rstamp', int(now),
      'readers', q.readers + 1)
  end
  outlive(lease + IDLE)
  return { 1, 0 }
end

local s = load()
local held = s.readers[token] ~= nil
local blocked = s.writer or s.foreign_writer_until or (writer_preferred and #s.intents > 0)
if blocked and not held then
  set_expiry(s)
  wake(s)
  return { 0, retry_hint(s) }
end

hold_read(s, token, lease)
set_expiry(s)
wake(s)
return { 1, 0 }
