-- The ORIGINAL design's release (read or write), written from its description for the interop tests and the benchmark.
-- KEYS[1]  the lock hash
-- ARGV[1]  field: 'read' or 'write'
-- ARGV[2]  the timestamp the caller's acquire stored
-- Returns 1 when the field held that timestamp and was deleted, else 0. Any reader
-- whose stamp is the latest deletes `read`, whoever else still reads.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  return redis.call('HDEL', KEYS[1], ARGV[1])
end
return 0
