-- Original design, single-instance version: acquire write.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
if redis.call('SET', KEYS[2], '1', 'EX', ARGV[1], 'NX') then
  return 1
end
return 0
