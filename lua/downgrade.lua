-- downgrade.lua: turn this token's write hold into a read hold in one step, so no
-- other writer can enter in between; wakes the waiting readers.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  token of the write hold (it becomes the read hold's token)
-- ARGV[5]  read lease (ms)
-- Returns 1 downgraded (also when a resent command finds it done), 0 the write hold is gone.
bind(KEYS, ARGV)
local s = load(ARGV[4])
local lease = tonumber(ARGV[5])

local done = 0
if s.writer == s.token then
  drop_writer(s)
  hold_read(s, lease)
  done = 1
elseif reading(s) then
  done = 1
end
settle(s)
return done
