-- KEYS: members. Deletes lapsed registrations; returns how many.
local now = now_us()
local all = redis.call('HGETALL', KEYS[1])
local n = 0
for i = 1, #all, 2 do
  if num(cjson.decode(all[i + 1]).expires_us) <= now then
    redis.call('HDEL', KEYS[1], all[i])
    n = n + 1
  end
end
return n
