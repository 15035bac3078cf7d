-- acquire_read.lua: take a read lease (plain or upgradable), or say how long the
-- holds may last.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  token of this acquisition (128 random bits, hex)
-- ARGV[5]  read lease (ms)
-- ARGV[6]  '1' for writer preference (queued writers and a pending upgrade keep
--          new readers out), else '0'
-- ARGV[7]  '1' for the upgradable hold: also refused while another upgradable
--          reader holds, else '0'
-- Returns {1, 0} granted (also when this token already holds: a resent command,
--         which renews it), {0, ms} refused; ms = a time to retry by: when the
--         current holds end unless renewed, or when the queued writers' places lapse.
bind(KEYS, ARGV)
local s = load(ARGV[4])
local lease, writer_preferred, upgradable = tonumber(ARGV[5]), ARGV[6] == '1', ARGV[7] == '1'

if reading(s) then
  hold_read(s, lease)
  settle(s)
  return { 1, 0 }
end
local written = s.writer or s.original_writer_until
local queue_first = writer_preferred and queued(s) and first_writer(s)
if written or queue_first or (writer_preferred and s.upgrade) or (upgradable and s.upgradable) then
  if upgradable and s.upgradable and not s.h['u:wanted'] then
    set(s, 'u:wanted', '1') -- so the end of that hold is announced
  end
  settle(s)
  if queue_first and not (s.writer or s.original_writer_until) then
    return { 0, queue_hint(s) }
  end
  return { 0, retry_hint(s) }
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
