-- Original design, cluster version: acquire read.
local key, ttl, write_timeout, now = KEYS[1], ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local write = redis.call('HGET', key, 'write')
if write and now - tonumber(write) <= write_timeout then
  return 0
end
redis.call('HSET', key, 'read', ARGV[4])
redis.call('PEXPIRE', key, ttl)
return 1
