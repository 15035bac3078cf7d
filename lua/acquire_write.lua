-- acquire_write.lua: take the write lease, or queue for it; or upgrade the caller's
-- upgradable read hold to it.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  token of this acquisition (128 random bits, hex), or of the upgradable hold
-- ARGV[5]  write lease (ms)
-- ARGV[6]  intent lifetime (ms): when refused, queue (or stay queued; an upgrade:
--          keep new readers out) this long; '0' never queues (try_write, try_upgrade)
-- ARGV[7]  '1': upgrade the token's upgradable hold, else '0'
-- Returns {1, fence} granted (also when this token already holds: a resent command,
--         or a hold another script's release handed to it; either way renewed to a
--         full lease), {0, ms, fence} refused; ms = time until the current holds end
--         unless renewed; fence = the lock's last fencing token (at least the server
--         time in µs, as every later one is: the counter goes when the key expires),
--         so the caller can tell a hand-over message sent before this refusal from
--         one sent after it.
--         {-1, 0} for an upgrade whose upgradable hold is gone (lost).
-- Writers are served in arrival order: a refused writer keeps its place in the queue,
-- and a release hands the lock to the first queued writer (holds.lua, `settle`). An
-- upgrade goes before them all: the upgradable hold already keeps every writer out.
-- A waiting writer or upgrade refused while other readers hold calls them back: it
-- publishes 'w' last, at every such refusal (a process whose tasks share one read
-- hold lets no more of them in, src/shared_reads.rs).
bind(KEYS, ARGV)
local reply, now, now_us = layout.fast_path('acquire_write', ARGV)
if reply then
  return reply
end
local s = load(ARGV[4], false, now, now_us)
local lease, intent_ttl, upgrade = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1'

local function refused()
  settle(s)
  -- The upgradable reader's own hold is one of the readers.
  if intent_ttl > 0 and s.nreaders > (upgrade and 1 or 0) then
    publish('w')
  end
  return { 0, retry_hint(s), refusal_fence(s) }
end

if s.writer == s.token then
  hold_write(s, s.token, lease)
  settle(s)
  return { 1, s.fence }
end
if upgrade or s.place or s.linked then
  -- A waiter's attempt: readers that died in line keep it out no longer than their
  -- places (a new writer takes its place in line first, as the fast way does).
  batches.drop_lapsed(s)
end

if upgrade then
  if s.upgradable ~= s.token or original_beside(s, false) then
    settle(s)
    return { -1, 0 }
  end
  if upgrade_ready(s) then
    local fence = upgrade_to_write(s, lease)
    settle(s)
    return { 1, fence }
  end
  if intent_ttl > 0 then
    local deadline = s.now + intent_ttl
    s.upgrade = { deadline = deadline, first_lease = min(intent_ttl, lease) }
    set(s, 'u:upgrade', int(deadline) .. ':' .. int(s.upgrade.first_lease))
  end
  return refused()
end

if is_free(s) then
  local first = first_in_line(s)
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
  s.place = join_queue(s, s.token, s.linked, intent_ttl, min(intent_ttl, lease))
  s.linked = true
end
return refused()
