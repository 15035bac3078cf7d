-- release.lua: end whatever this token has (a read hold, upgradable or not, with its
-- pending upgrade, or its share of a batch's grant; the write hold; a place in line,
-- its own or in a batch of readers); hands the lock on or wakes who can go next.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  token
-- Returns 1 when a live hold was removed, 0 when this token held nothing (already
-- released, expired, or a resent command): either way the token no longer holds.
bind(KEYS, ARGV)
local reply, now, now_us = layout.fast_path('release', ARGV)
if reply then
  return reply
end
local s = load(ARGV[4], false, now, now_us)

local removed = 0
if s.writer == s.token then
  drop_writer(s)
  removed = 1
elseif s.mine then
  if reading(s) then
    removed = 1
  end
  drop_reader(s, s.token)
elseif s.leftover then
  del(s, 'r:' .. s.token)
end
if s.grouped then
  batches.leave(s, s.grouped, true) -- a share of a grant that expired uncounted
end
if s.place then
  leave_queue(s)
end
if s.batch then
  batches.leave(s, s.batch, false)
end
settle(s)
return removed
