-- The ORIGINAL design's write acquire, written from its description for the interop tests and the benchmark.
-- KEYS[1]  the lock hash
-- ARGV[1]  whole-key timeout (ms)   ARGV[2] read timeout (ms)
-- ARGV[3]  write timeout (ms)       ARGV[4] the CALLER's clock (ms)
-- Returns 1 granted, 0 refused. Granted when neither the `write` nor the `read`
-- stamp is fresh by the caller's clock.
local key = KEYS[1]
local key_ttl, read_timeout, write_timeout = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local writer = redis.call('HGET', key, 'write')
if writer and now - tonumber(writer) <= write_timeout then
  return 0
end
local reader = redis.call('HGET', key, 'read')
if reader and now - tonumber(reader) <= read_timeout then
  return 0
end
redis.call('HSET', key, 'write', ARGV[4])
redis.call('PEXPIRE', key, key_ttl)
return 1
