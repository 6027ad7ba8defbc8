-- KEYS: members, lease. ARGV: holder, metadata, priority, ttl_us.
-- A heartbeat, then read.lua, in one call: an idle follower's only request.
local now = now_us()
beat(KEYS[1], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), now)
local r = load(KEYS[2])
if r.term == '' then
  return {}
end
return reply(r, now)
