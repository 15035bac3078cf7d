-- state.lua: who holds the lock, for display. Only reads (nothing is purged), so a
-- user allowed reads only can run it and a status check never changes the lock.
-- It reads the whole hash: the one script whose cost grows with the readers and the
-- queue, run only when someone asks.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- Returns {now_ms, fence, writer_token or '', writer_until_ms,
--          original_writer_until_ms or 0, original_reader_until_ms or 0,
--          {{reader_token, until_ms}, ...}, {{queued_writer_token, until_ms}, ...},
--          upgradable_token or '', upgrade_pending (1 or 0)}
-- with queued writers first in line first; the upgradable reader is also one of the
-- readers.
bind(KEYS, ARGV)
local s = load('')

local flat = redis.call('HGETALL', KEY)
local h = {}
for i = 1, #flat, 2 do
  h[flat[i]] = flat[i + 1]
end
local readers = {}
if s.nreaders > 0 then
  for field, value in pairs(h) do
    local deadline = tonumber(value)
    if sub(field, 1, 2) == 'r:' and deadline > s.gone and deadline > s.now then
      readers[#readers + 1] = { sub(field, 3), deadline }
    end
  end
end
local queue = {}
local token = s.head
while token do
  if h['wait:' .. token] then
    local deadline = parse_place(h['wait:' .. token])
    if deadline > s.now then
      queue[#queue + 1] = { token, deadline }
    end
  end
  token = h['wn:' .. token]
end
return { s.now, s.fence, s.writer or '', s.writer_until or 0, s.original_writer_until or 0,
         s.original_reader_until or 0, readers, queue, s.upgradable or '', s.upgrade and 1 or 0 }
