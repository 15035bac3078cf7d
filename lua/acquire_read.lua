-- acquire_read.lua: take a read lease, or say how long the holds may last.
-- KEYS[1]  the lock's state hash
-- ARGV[1..3] common (see helpers.lua)
-- ARGV[4]  token of this acquisition (128 random bits, hex)
-- ARGV[5]  read lease (ms)
-- ARGV[6]  '1' when queued writers keep new readers out (writer preference), else '0'
-- Returns {1, 0} granted (also when this token already holds: a resent command, which
--         renews it), {0, ms} refused; ms = a time to retry by: when the current
--         holds end unless renewed, or when the queued writers' places lapse.
bind(KEYS, ARGV)
local s = load(ARGV[4])
local lease, writer_preferred = tonumber(ARGV[5]), ARGV[6] == '1'

if not reading(s) then
  local queue_first = writer_preferred and queued(s) and first_writer(s)
  if s.writer or s.original_writer_until or queue_first then
    settle(s)
    if s.writer or s.original_writer_until then
      return { 0, retry_hint(s) }
    end
    return { 0, queue_hint(s) }
  end
end
hold_read(s, lease)
settle(s)
return { 1, 0 }
