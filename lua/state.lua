-- state.lua: read the lock for display; writes nothing.
-- KEYS[1]  the lock hash
-- ARGV     none
-- Returns {now_ms, {field, value, field, value, ...}} with the server's clock, so
-- the caller can tell live entries from expired ones.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return { now, redis.call('HGETALL', KEYS[1]) }
