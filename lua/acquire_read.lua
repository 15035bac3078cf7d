-- acquire_read.lua: take a read lease, or say how long the holds may last.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see prelude.lua)
-- ARGV[4]  token of this acquisition (128 random bits, hex)
-- ARGV[5]  read lease (ms)
-- ARGV[6]  '1' when queued writers keep new readers out (writer preference), else '0'
-- Returns {1, 0} granted (also when this token already holds: a resent command),
--         {0, ms} refused; ms = a time to retry by: when the current holds end
--         unless renewed, or when the queued writers' places lapse.
local token, lease, writer_preferred = ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1'

-- Decided without reading the other readers' entries unless the lock shows an original
-- client's trace; an expired writer or queue entry takes the full path, which purges
-- it.
local q = quick(token)
if q then
  local now = server_time()
  local held = q.mine ~= nil and q.mine > now
  if q.writer then
    if q.writer_until > now and not held then
      return { 0, q.writer_until - now }
    end
  elseif writer_preferred and q.queue_until and not held then
    if q.queue_until > now then
      return { 0, q.queue_until - now }
    end
  else
    local stamp = int(now)
    if q.mine then
      redis.call('HSET', KEY, 'r:' .. token, int(now + lease), 'read', stamp, 'rstamp', stamp)
    else
      redis.call('HSET', KEY, 'r:' .. token, int(now + lease), 'read', stamp, 'rstamp', stamp,
        'readers', q.readers + 1)
    end
    outlive(lease, q.found == 0)
    return { 1, 0 }
  end
end

local s = load()
local held = s.readers[token] ~= nil
local blocked = s.writer or s.original_writer_until or (writer_preferred and #s.intents > 0)
if blocked and not held then
  set_expiry(s)
  wake(s)
  if s.writer or s.original_writer_until then
    return { 0, retry_hint(s) }
  end
  return { 0, queue_hint(s) }
end

hold_read(s, token, lease)
set_expiry(s)
wake(s)
return { 1, 0 }
