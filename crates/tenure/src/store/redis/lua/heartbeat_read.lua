-- KEYS: members, lease. ARGV: holder, metadata, priority, ttl_us.
-- heartbeat.lua then read.lua in one call: an idle follower's only request.
local now = now_us()
local joined = s(now)
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  joined = cjson.decode(v).joined_us
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({metadata = ARGV[2],
  priority = ARGV[3], joined_us = joined, heartbeat_us = s(now),
  expires_us = s(now + tonumber(ARGV[4]))}))
local r = load(KEYS[2])
if r.term == '' then
  return {}
end
return reply(r, now)
