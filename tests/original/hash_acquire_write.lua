-- Original design, cluster version: acquire write.
local key, ttl = KEYS[1], ARGV[1]
local read_timeout, write_timeout, now = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local write = redis.call('HGET', key, 'write')
if write and now - tonumber(write) <= write_timeout then
  return 0
end
local read = redis.call('HGET', key, 'read')
if read and now - tonumber(read) <= read_timeout then
  return 0
end
redis.call('HSET', key, 'write', ARGV[4])
redis.call('PEXPIRE', key, ttl)
return 1
