-- state.lua: who holds the lock, for display. Only reads: expired entries are left
-- out of the reply but not purged, so a user allowed reads only can run it and a
-- status check never changes the lock.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see prelude.lua)
-- Returns {now_ms, fence, writer_token or '', writer_until_ms,
--          original_writer_until_ms or 0, original_reader_until_ms or 0,
--          {{reader_token, until_ms}, ...}, {{queued_writer_token, until_ms}, ...}}
-- with queued writers first in line first.
local s = load(true)

local readers = {}
for token, deadline in pairs(s.readers) do
  readers[#readers + 1] = { token, deadline }
end
local queue = {}
for _, intent in ipairs(s.intents) do
  queue[#queue + 1] = { intent.token, intent.deadline }
end
return { s.now, s.fence, s.writer or '', s.writer_until or 0, s.original_writer_until or 0,
         s.original_reader_until or 0, readers, queue }
