-- KEYS: members. ARGV: holder, metadata, priority, ttl_us.
local now = now_us()
local joined = s(now)
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  joined = cjson.decode(v).joined_us
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({metadata = ARGV[2],
  priority = ARGV[3], joined_us = joined, heartbeat_us = s(now),
  expires_us = s(now + tonumber(ARGV[4]))}))
return 1
