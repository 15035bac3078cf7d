-- acquire_read.lua: take a read lease (plain or upgradable), or say how long the
-- holds may last; a plain reader that waits under writer preference takes its
-- place in line instead (a batch: see holds.lua), and the release it waits for
-- grants it.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  token of this acquisition (128 random bits, hex)
-- ARGV[5]  read lease (ms)
-- ARGV[6]  '1' for writer preference (a reader waits for the writers in line
--          before it and a pending upgrade), else '0' (it waits only for a writer
--          that holds)
-- ARGV[7]  '1' for the upgradable hold: also refused while another upgradable
--          reader holds, else '0'
-- ARGV[8]  intent lifetime (ms): when refused under writer preference, a plain
--          reader waits in line (or stays there) this long; '0' never waits in line
--          (try_read, upgradable reads)
-- Returns {1, 0} granted (also when this token already holds: a resent command,
--         which renews it; or when its batch was granted by another script),
--         {0, ms, 0, batch} refused; ms = a time to retry by: when the current
--         holds end unless renewed, or when the places in line lapse; batch = the
--         name of the batch it waits in ('' when it does not wait in line): the
--         message that grants the batch is that name.
bind(KEYS, ARGV)
local reply, now, now_us = layout.fast_path('acquire_read', ARGV)
if reply then
  return reply
end
local s = load(ARGV[4], false, now, now_us)
local lease, writer_preferred, upgradable = tonumber(ARGV[5]), ARGV[6] == '1', ARGV[7] == '1'
local intent_ttl = tonumber(ARGV[8]) or 0

if reading(s) then
  hold_read(s, lease)
  settle(s)
  return { 1, 0 }
end
local written = s.writer or s.original_writer_until
local first = writer_preferred and queued(s) and first_in_line(s)
if first and is_batch(first) and not written and not s.upgrade then
  -- A batch heads the line behind a place that just lapsed: it goes now.
  batches.serve(s)
  if reading(s) then
    hold_read(s, lease)
    settle(s)
    return { 1, 0 }
  end
  first = queued(s) and first_in_line(s)
end
if written or first or (writer_preferred and s.upgrade) or (upgradable and s.upgradable) then
  if upgradable and s.upgradable and not s.h['u:wanted'] then
    set(s, 'u:wanted', '1') -- so the end of that hold is announced
  end
  local batch = ''
  if intent_ttl > 0 and writer_preferred and not upgradable then
    batch = batches.join(s, intent_ttl, min(intent_ttl, lease))
  end
  settle(s)
  if first and not (s.writer or s.original_writer_until) then
    return { 0, retry_hint(s, true), 0, batch }
  end
  return { 0, retry_hint(s), 0, batch }
end
local others_until = 0
if s.nreaders > 0 then
  others_until = s.readers_until
end
hold_read(s, lease)
if upgradable then
  hold_upgradable(s, others_until)
end
settle(s)
return { 1, 0 }
