-- downgrade.lua: turn this token's write hold into a read hold in one step, so no
-- other writer can enter in between; wakes the waiting readers.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see prelude.lua)
-- ARGV[4]  token of the write hold (it becomes the read hold's token)
-- ARGV[5]  read lease (ms)
-- Returns 1 downgraded (also when a resent command finds it done), 0 the write hold is gone.
local token, lease = ARGV[4], tonumber(ARGV[5])
local s = load()

if s.readers[token] and s.writer ~= token then
  set_expiry(s)
  wake(s)
  return 1
end
if s.writer ~= token then
  set_expiry(s)
  wake(s)
  return 0
end
drop_writer(s)
hold_read(s, token, lease)
set_expiry(s)
wake(s)
return 1
