-- acquire_set.lua: take several locks of one slot at once, all or none, without
-- waiting: each member as acquire_read.lua (a plain read) or acquire_write.lua
-- would take it with no place in line; at the first refusal the members taken
-- before it are released again (release.lua, last first) in the same call, so no
-- other client ever sees a part of the set held.
-- KEYS[1..n] the members' state hashes, in the set's order (all in one slot)
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  '1' for writer preference (a read member defers to queued writers),
--          else '0'
-- ARGV[5]  read lease (ms)
-- ARGV[6]  write lease (ms)
-- ARGV[5 + 2i], ARGV[6 + 2i]  member i's mode ('r' or 'w') and token (128 random
--          bits, hex), in KEYS' order
-- Returns {1, fence_1, ..., fence_n} every member granted (a read member's fence
--         is 0; a resent call finds its holds and renews them), {0, i, ms} member i
--         refused and none held; ms as that member's acquire script says it.
-- The operations are the library's functions (op_acquire_read...), called as the
-- server would call them, each binding its own key.
local granted = { 1 }
for i = 1, #KEYS do
  local mode, token = ARGV[5 + 2 * i], ARGV[6 + 2 * i]
  local reply
  if mode == 'w' then
    reply = op_acquire_write({ KEYS[i] }, { ARGV[1], ARGV[2], ARGV[3], token, ARGV[6], '0', '0' })
  else
    reply = op_acquire_read({ KEYS[i] }, { ARGV[1], ARGV[2], ARGV[3], token, ARGV[5], ARGV[4], '0', '0' })
  end
  if reply[1] ~= 1 then
    for j = i - 1, 1, -1 do
      op_release({ KEYS[j] }, { ARGV[1], ARGV[2], ARGV[3], ARGV[6 + 2 * j] })
    end
    return { 0, i, reply[2] }
  end
  granted[i + 1] = reply[2]
end
return granted
