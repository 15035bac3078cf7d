-- downgrade.lua: turn this token's write hold, or its upgradable hold, into a plain
-- read hold in one step, so no other writer can enter in between; wakes who can go.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  token of the hold (it becomes the read hold's token)
-- ARGV[5]  read lease (ms)
-- ARGV[6]  'write' or 'upgradable': the hold the caller downgrades
-- Returns 1 downgraded (also when a resent command finds it done), 0 the hold is gone.
bind(KEYS, ARGV)
local s = load(ARGV[4])
local lease, from_write = tonumber(ARGV[5]), ARGV[6] == 'write'

local done = 0
if from_write and s.writer == s.token then
  drop_writer(s)
  hold_read(s, lease)
  done = 1
elseif reading(s) then
  if s.upgradable == s.token then
    end_upgradable(s)
  end
  done = 1
end
settle(s)
return done
