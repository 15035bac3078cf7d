-- Original design, single-instance version: release (no owner check).
return redis.call('DEL', KEYS[1])
