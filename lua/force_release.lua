-- force_release.lua: an operator's break-glass: end every hold, whoever owns it.
-- Queued writers keep their places (the first is handed the lock) and the fencing
-- counter is kept, so tokens still rise. Holders learn of it at their next renewal
-- (their lease is lost).
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- Returns the number of holds removed (readers, the writer, original-design stamps).
bind(KEYS, ARGV)
local s = load('')

local removed = s.nreaders
if s.nreaders > 0 then
  -- Every reader's field becomes a leftover.
  s.gone = max(s.gone, s.readers_until)
  set(s, 'readers_gone', int(s.gone))
  del(s, 'readers')
  del(s, 'readers_until')
end
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
s.nreaders, s.readers_until, s.writer, s.writer_until = 0, 0, nil, nil
s.original_writer_until, s.original_reader_until = nil, nil
settle(s)
return removed
