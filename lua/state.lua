-- state.lua: who holds the lock, for display. Only reads (nothing is purged), so a
-- user allowed reads only can run it and a status check never changes the lock.
-- It reads the whole hash: the one script whose cost grows with the readers and the
-- queue, run only when someone asks.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- Returns {now_ms, fence, writer_token or '', writer_until_ms,
--          original_writer_until_ms or 0, original_reader_until_ms or 0,
--          {{reader_token, until_ms}, ...}, {{queued_writer_token, until_ms}, ...},
--          upgradable_token or '', upgrade_pending (1 or 0),
--          {{waiting_reader_token, until_ms}, ...}, {kept_token, ...}}
-- with queued writers first in line first; the upgradable reader is also one of the
-- readers; readers that hold by a batch's grant are readers (until: the batch's
-- deadline, or their own place's if that is earlier); waiting readers are those that
-- wait in line (until: when their own place lapses unless they come back), first in
-- line first. Kept tokens: the `k:` fields, which a client that keeps a read hold
-- idle sets (and clears) with plain HSET/HDEL; no script reads them otherwise, and
-- one whose token no longer reads means nothing.
bind(KEYS, ARGV)
local s = load('', true)

local flat = redis.call('HGETALL', KEY)
local h = {}
for i = 1, #flat, 2 do
  h[flat[i]] = flat[i + 1]
end
local readers, members, kept = {}, {}, {}
for field, value in pairs(h) do
  local kind = sub(field, 1, 3)
  if sub(field, 1, 2) == 'k:' then
    kept[#kept + 1] = sub(field, 3)
  elseif kind == 'rw:' then
    local batch, own = parse_place(value)
    members[batch] = members[batch] or {}
    members[batch][#members[batch] + 1] = { sub(field, 4), own }
  elseif s.nreaders > 0 and sub(field, 1, 2) == 'r:' then
    local deadline = tonumber(value)
    if deadline > s.gone and deadline > s.now then
      readers[#readers + 1] = { sub(field, 3), deadline }
    end
  end
end
-- Readers that hold by a batch's grant.
for batch, tokens in pairs(members) do
  local deadline = tonumber(h['rg:' .. batch])
  if s.nreaders > 0 and deadline and deadline > s.gone then
    for _, member in ipairs(tokens) do
      local until_ = min(deadline, member[2])
      if until_ > s.now then
        readers[#readers + 1] = { member[1], until_ }
      end
    end
  end
end
local queue, waiting = {}, {}
local entry = s.head
while entry do
  if h['wait:' .. entry] then
    local deadline = parse_place(h['wait:' .. entry])
    if deadline <= s.now then
      -- lapsed: nobody waits there any more
    elseif is_batch(entry) then
      for _, member in ipairs(members[entry] or {}) do
        if member[2] > s.now then
          waiting[#waiting + 1] = member
        end
      end
    else
      queue[#queue + 1] = { entry, deadline }
    end
  end
  entry = h['wn:' .. entry]
end
return { s.now, s.fence, s.writer or '', s.writer_until or 0, s.original_writer_until or 0,
         s.original_reader_until or 0, readers, queue, s.upgradable or '', s.upgrade and 1 or 0,
         waiting, kept }
