-- acquire_write.lua: take the write lease, or queue for it.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see prelude.lua)
-- ARGV[4]  token of this acquisition (128 random bits, hex)
-- ARGV[5]  write lease (ms)
-- ARGV[6]  intent lifetime (ms): when refused, queue (or stay queued) this long;
--          '0' never queues (try_write)
-- Returns {1, fence} granted (also when this token already holds: a resent command),
--         {0, ms} refused; ms = time until the current holds end unless renewed.
-- Writers are served in arrival order: a refused writer keeps its place in the queue.
local token, lease, intent_ttl = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])

-- Nobody holds or queues: granted without reading the whole hash.
local q = quick(token)
if q and not q.writer and no_readers_nor_queue(q) then
  local now, now_us = server_time()
  local fence = math.max(q.fence + 1, now_us)
  redis.call('HSET', KEY, 'fence', int(fence), 'w:owner', token, 'w:until', int(now + lease),
    'write', int(now), 'wstamp', int(now))
  redis.call('PEXPIRE', KEY, int(lease + IDLE))
  return { 1, fence }
end

local s = load()

if s.writer == token then
  set_expiry(s)
  wake(s)
  return { 1, s.fence }
end

local first = s.intents[1]
if not is_free(s) or (first and first.token ~= token) then
  if intent_ttl > 0 then
    local seq = nil
    for _, intent in ipairs(s.intents) do
      if intent.token == token then
        seq, intent.deadline = intent.seq, s.now + intent_ttl
      end
    end
    if not seq then
      seq = redis.call('HINCRBY', KEY, 'wseq', 1)
      s.intents[#s.intents + 1] = { token = token, seq = seq, deadline = s.now + intent_ttl }
    end
    redis.call('HSET', KEY, 'wait:' .. token, int(seq) .. ':' .. int(s.now + intent_ttl))
    mark_queue(s)
  end
  set_expiry(s)
  wake(s)
  return { 0, retry_hint(s) }
end

drop_intent(s, token)
local fence = math.max(s.fence + 1, s.now_us)
redis.call('HSET', KEY, 'fence', int(fence))
hold_write(s, token, lease)
set_expiry(s)
return { 1, fence }
