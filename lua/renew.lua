-- renew.lua: extend this token's live hold and refresh the `read`/`write` stamp
-- that original-design clients look at.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see prelude.lua)
-- ARGV[4]  token of the hold (read or write)
-- ARGV[5]  lease (ms) from now
-- Returns 1 renewed, 0 the hold is gone (expired or released): the lease is lost.
local token, lease = ARGV[4], tonumber(ARGV[5])
local s = load()

local renewed = 0
if s.writer == token then
  hold_write(s, token, lease)
  renewed = 1
elseif s.readers[token] then
  hold_read(s, token, lease)
  renewed = 1
end
set_expiry(s)
wake(s)
return renewed
