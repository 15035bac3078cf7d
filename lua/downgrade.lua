-- downgrade.lua: turn this token's write hold, or its upgradable hold, into a plain
-- read hold in one step, so no other writer can enter in between; wakes who can go.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  token of the hold (it becomes the read hold's token)
-- ARGV[5]  read lease (ms)
-- ARGV[6]  'write' or 'upgradable': the hold the caller downgrades
-- Returns {1, queued} downgraded (also when a resent command finds it done), {0, -1}
-- the hold is gone. `queued`, of a write hold's downgrade: how long ago (ms) the
-- writer now first in line joined it, -1 if no writer waits; the client's reads
-- that came while it wrote and after that writer queued do not join the read hold
-- (they ask, and wait behind it). -2 when the line's head, after the readers in
-- line were let in, is not a writer's live place (an entry that withdrew or lapsed,
-- a batch behind one) or has no `wq:` field (an older version's): as if a writer
-- had queued before the write, so no such read passes one. -1 for an upgradable
-- hold.
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
local queued = -1
if done == 1 and from_write and s.head then
  queued = -2
  if not is_batch(s.head) then
    local v = fields(s, { 'wait:' .. s.head, 'wq:' .. s.head })
    if v[1] and v[2] and parse_place(v[1]) > s.now then
      queued = s.now - tonumber(v[2])
    end
  end
end
return { done, queued }
