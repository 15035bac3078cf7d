-- force_release.lua: an operator's break-glass: end every hold, whoever owns it.
-- Queued writers keep their places and the fencing counter is kept, so tokens
-- still rise. Holders learn of it at their next renewal (their lease is lost).
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see prelude.lua)
-- Returns the number of holds removed (readers, the writer, original-design stamps).
local s = load()
local removed = s.nreaders
for token in pairs(s.readers) do
  redis.call('HDEL', KEY, 'r:' .. token)
end
count_readers(0)
if s.writer or s.original_writer_until then
  removed = removed + 1
end
if s.original_reader_until then
  removed = removed + 1
end
redis.call('HDEL', KEY, 'w:owner', 'w:until')
layout.clear_all(s)
s.readers, s.nreaders, s.writer, s.writer_until = {}, 0, nil, nil
s.original_writer_until, s.original_reader_until = nil, nil
s.freed = true
set_expiry(s)
wake(s)
return removed
