-- The ORIGINAL design's read acquire (docs/ORIGINAL_DESIGN.md,
-- "Cluster version"), written from its description for the interop tests and the benchmark. Not used by the crate.
-- KEYS[1]  the lock hash
-- ARGV[1]  whole-key timeout (ms)   ARGV[2] read timeout (ms)
-- ARGV[3]  write timeout (ms)       ARGV[4] the CALLER's clock (ms): its proof of ownership
-- Returns 1 granted, 0 refused. A reader may enter unless a writer's stamp is fresh
-- by the caller's clock; every reader overwrites the one shared `read` field.
local key = KEYS[1]
local key_ttl, write_timeout = tonumber(ARGV[1]), tonumber(ARGV[3])
local now = tonumber(ARGV[4])
local writer = redis.call('HGET', key, 'write')
if writer and now - tonumber(writer) <= write_timeout then
  return 0
end
redis.call('HSET', key, 'read', ARGV[4])
redis.call('PEXPIRE', key, key_ttl)
return 1
