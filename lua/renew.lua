-- renew.lua: extend this token's live hold in one mode and refresh the `read`/`write`
-- stamp that original-design clients look at.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  token of the hold
-- ARGV[5]  lease (ms) from now
-- ARGV[6]  'write' or 'read': the mode the caller holds in. A hold of the other mode
--          is not touched (a write renewal that arrives after a downgrade must not
--          re-lease the read hold with the write lease).
-- Returns 1 renewed, 2 a read hold renewed while a writer or an upgrade waits (the
--         lock's line or a pending upgrade exists: the holder's process then lets no
--         more of its tasks join the hold; unlike a call-back message, this reply is
--         never lost), 0 the lease is lost: the hold is gone (expired, released, or
--         now in the other mode), or an original-design client holds beside it (it
--         judged our stamp stale and entered; renewing would overwrite its stamp).
bind(KEYS, ARGV)
local reply, now, now_us = layout.fast_path('renew', ARGV)
if reply then
  return reply
end
local s = load(ARGV[4], false, now, now_us)
local lease, write = tonumber(ARGV[5]), ARGV[6] == 'write'

local renewed = 0
if original_beside(s, write) then
  renewed = 0
elseif write and s.writer == s.token then
  hold_write(s, s.token, lease)
  renewed = 1
elseif not write and reading(s) then
  hold_read(s, lease)
  renewed = 1
end
settle(s)
if renewed == 1 and not write and (s.head or s.upgrade) then
  renewed = 2
end
return renewed
