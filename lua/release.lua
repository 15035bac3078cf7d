-- release.lua: end whatever this token has (a read hold, the write hold, a place in
-- the writers' queue); wakes who can go next.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see prelude.lua)
-- ARGV[4]  token
-- Returns 1 when a hold was removed, 0 when this token held nothing (already
-- released, expired, or a resent command): either way the token no longer holds.
local token = ARGV[4]

-- A reader leaves without reading the other readers' entries.
local q = quick(token)
if q and q.mine and q.mine > server_time() then
  -- Others remain: nobody needs waking.
  if q.readers > 1 then
    redis.call('HDEL', KEY, 'r:' .. token)
    redis.call('HSET', KEY, 'readers', q.readers - 1)
    return 1
  end
  -- The last one, by the count and by the fields there are, with no writer entry and
  -- nobody queued: the lock is free, and nobody can be waiting for it (a waiting
  -- writer always queues; a reader waits only behind a writer or the queue), so
  -- nothing is published. (With writers queued, the full path picks the one to
  -- wake.)
  if not q.writer and not q.queue_until and redis.call('HLEN', KEY) == q.found then
    redis.call('HDEL', KEY, 'r:' .. token, 'readers', 'read', 'rstamp')
    if q.found > 4 then -- else those were all its fields: the key is gone
      redis.call('PEXPIRE', KEY, IDLE)
    end
    return 1
  end
end

-- The writer leaves with nobody queued: the lock is free.
if q and q.writer == token and q.writer_until > server_time() and no_readers_nor_queue(q) then
  redis.call('HDEL', KEY, 'w:owner', 'w:until', 'write', 'wstamp')
  redis.call('PEXPIRE', KEY, IDLE)
  redis.call(PUBLISH, CHANNEL, '*')
  return 1
end

local s = load()
local removed = 0
if s.writer == token then
  drop_writer(s)
  removed = 1
elseif s.readers[token] then
  drop_reader(s, token)
  removed = 1
end
drop_intent(s, token)
set_expiry(s)
wake(s)
return removed
