-- force_release.lua: an operator's break-glass: end every hold, whoever owns it.
-- Queued writers keep their places (the first is handed the lock) and the fencing
-- counter is kept, so tokens still rise. Holders learn of it at their next renewal
-- (their lease is lost).
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- Returns the number of holds removed (readers, the writer, original-design stamps).
-- Every reader's `r:` field is deleted, counted or not, so no evicted reader can
-- come back and no later reader is mistaken for one of them. This is the one
-- script whose work grows with the number of readers (a page of fields at a time);
-- it is meant for rare manual use.
bind(KEYS, ARGV)
local s = load('')

-- One page of `r:` fields per HSCAN call, deleted as it comes (an HDEL per page
-- keeps every call's arguments bounded, however many readers there are).
local PAGE = 1000

local removed = s.nreaders
local cursor = '0'
repeat
  local page = redis.call('HSCAN', KEY, cursor, 'MATCH', 'r:*', 'COUNT', PAGE)
  cursor = page[1]
  local found, names = page[2], {}
  for i = 1, #found, 2 do
    names[#names + 1] = found[i]
  end
  if #names > 0 then
    redis.call('HDEL', KEY, unpack(names))
  end
until cursor == '0'
del(s, 'readers')
del(s, 'readers_until')
del(s, 'readers_gone')
if s.upgradable then
  end_upgradable(s)
end
if s.writer or s.original_writer_until then
  removed = removed + 1
  s.freed_writer = true
end
if s.original_reader_until then
  removed = removed + 1
end
del(s, 'w:owner')
del(s, 'w:until')
layout.clear_all(s)
s.nreaders, s.readers_until, s.gone, s.writer, s.writer_until = 0, 0, 0, nil, nil
s.original_writer_until, s.original_reader_until = nil, nil
s.mine, s.leftover = nil, nil
settle(s)
return removed
