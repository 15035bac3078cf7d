-- force_release.lua: an operator's break-glass: end every hold, whoever owns it.
-- Queued writers keep their places and the fencing counter is kept, so tokens
-- still rise. Holders learn of it from the message `x`, published first (processes
-- that listen on the lock: their shared or kept read holds), or at their next
-- renewal (their lease is lost).
-- If read holds were ended, a reader no client is (FORCED_READER) holds for
-- FORCED_FENCE: other readers enter at once, writers after it. The tasks of an
-- evicted process may join its read hold until they hear of the release; they stop
-- by then whatever happens to the message, so no such join is beside a writer.
-- If only a writer was ended, the first queued writer is handed the lock.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- Returns the number of holds removed (readers, the writer, original-design stamps;
-- not a fence).
-- Every reader's `r:` field and every batch's grant (`rg:`, `rn:`) is deleted,
-- counted or not, so no evicted reader can come back and no later reader is
-- mistaken for one of them; batches still waiting in line keep their places. This
-- is the one script whose work grows with the number of readers (a page of fields
-- at a time); it is meant for rare manual use.
bind(KEYS, ARGV)
-- How long (ms) the fence keeps writers out: longer than a process's tasks may go
-- on joining a read hold after sending its last answered renewal (`JOIN_TRUST`,
-- two seconds, src/guard/lease.rs).
local FORCED_FENCE = 3000
-- The reader that stands for the fence: a token no client has (the high half all
-- ones, like the engine's strangers; `Tok::FORCED_READER`).
local FORCED_READER = 'ffffffffffffffff0000000000000004'
local s = load('', true) -- batches waiting in line are served after, not before

-- One page of `r:` fields per HSCAN call, deleted as it comes (an HDEL per page
-- keeps every call's arguments bounded, however many readers there are).
local PAGE = 1000

-- Deletes every field matching `pattern`, with `also(name)` for each (or nil).
local function delete_all(pattern, also)
  local cursor = '0'
  repeat
    local page = redis.call('HSCAN', KEY, cursor, 'MATCH', pattern, 'COUNT', PAGE)
    cursor = page[1]
    local found, names = page[2], {}
    for i = 1, #found, 2 do
      names[#names + 1] = found[i]
      if also then
        names[#names + 1] = also(found[i])
      end
    end
    if #names > 0 then
      redis.call('HDEL', KEY, unpack(names))
    end
  until cursor == '0'
end

-- A fence an earlier forced release left is no client's hold: the reply does not
-- count it (a new fence replaces it below).
local fence = tonumber(redis.call('HMGET', KEY, 'r:' .. FORCED_READER)[1])
local fenced = s.nreaders > 0 and fence ~= nil and fence > s.gone
local readers_ended = s.nreaders > 0
local removed = s.nreaders - (fenced and 1 or 0)
delete_all('r:*')
delete_all('rg:*', function(name)
  return 'rn:' .. sub(name, 4)
end)
del(s, 'readers')
del(s, 'readers_until')
del(s, 'readers_gone')
batches.forget(s)
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
s.mine, s.leftover, s.grouped = nil, nil, nil
if readers_ended then
  s.token = FORCED_READER
  hold_read(s, FORCED_FENCE)
end
publish('x')
settle(s)
return removed
