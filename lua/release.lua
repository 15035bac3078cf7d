-- release.lua: end whatever this token has (a read hold, upgradable or not, with its
-- pending upgrade; the write hold; a place in the writers' queue); hands the lock on
-- or wakes who can go next.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  token
-- Returns 1 when a live hold was removed, 0 when this token held nothing (already
-- released, expired, or a resent command): either way the token no longer holds.
bind(KEYS, ARGV)
local s = load(ARGV[4])

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
if s.place then
  leave_queue(s)
end
settle(s)
return removed
