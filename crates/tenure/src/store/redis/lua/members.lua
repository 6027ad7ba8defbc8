-- KEYS: members, lease. Returns {now, lease holder, its renewed_us, its
-- expires_us, holder, json, holder, json, ...}: the lease fields let the
-- reader count the lease's holder as live (a leader does not heartbeat).
local now = now_us()
local lease = redis.call('HMGET', KEYS[2], 'holder', 'renewed_us', 'expires_us')
local out = {s(now), lease[1] or '', lease[2] or '0', lease[3] or '0'}
for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do
  out[#out + 1] = v
end
return out
