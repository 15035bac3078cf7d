-- fenced_write.lua: write the caller's keys only if its token still holds the write
-- lock, all in one step, so a paused writer whose lease ran out cannot overwrite
-- what a newer holder wrote.
-- KEYS[1]     the lock hash
-- KEYS[FIRST_USER_KEY..n]  the keys to write (same hash tag as the lock: same slot)
-- ARGV[1..3]  common (see helpers.lua)
-- ARGV[4]     token of the write hold
-- then, per key to write, in order, three arguments:
--   'set' or 'del';  the value ('' for del);  expiry in ms ('0': none)
-- Returns the hold's fencing token when the writes were made, 0 when the hold is gone
-- or an original-design client holds beside it (nothing was written).
bind(KEYS, ARGV)
local s = load(ARGV[4])
local holds = s.writer == s.token and not original_beside(s, true)
settle(s)
if not holds then
  return 0
end
for i = FIRST_USER_KEY, #KEYS do
  local at = 5 + (i - FIRST_USER_KEY) * 3
  local op, value, ttl = ARGV[at], ARGV[at + 1], tonumber(ARGV[at + 2])
  if op == 'set' and ttl > 0 then
    redis.call('SET', KEYS[i], value, 'PX', ARGV[at + 2])
  elseif op == 'set' then
    redis.call('SET', KEYS[i], value)
  else
    redis.call('DEL', KEYS[i])
  end
end
return s.fence
