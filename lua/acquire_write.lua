-- acquire_write.lua: take the write lease, or queue for it.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  token of this acquisition (128 random bits, hex)
-- ARGV[5]  write lease (ms)
-- ARGV[6]  intent lifetime (ms): when refused, queue (or stay queued) this long;
--          '0' never queues (try_write)
-- Returns {1, fence} granted (also when this token already holds: a resent command,
--         or a hold another script's release handed to it; either way renewed to a
--         full lease), {0, ms, fence} refused; ms = time until the current holds end
--         unless renewed; fence = the lock's last fencing token, so the caller can
--         tell a hand-over message sent before this refusal from one sent after it.
-- Writers are served in arrival order: a refused writer keeps its place in the queue,
-- and a release hands the lock to the first queued writer (holds.lua, `settle`).
bind(KEYS, ARGV)
local s = load(ARGV[4])
local lease, intent_ttl = tonumber(ARGV[5]), tonumber(ARGV[6])

if s.writer == s.token then
  hold_write(s, s.token, lease)
  settle(s)
  return { 1, s.fence }
end

if is_free(s) then
  local first = first_writer(s)
  if not first or first == s.token then
    if first then
      serve_head(s)
    end
    local fence = grant_write(s, s.token, lease)
    settle(s)
    return { 1, fence }
  end
end

if intent_ttl > 0 then
  join_queue(s, intent_ttl, math.min(intent_ttl, lease))
end
settle(s)
return { 0, retry_hint(s), s.fence }
