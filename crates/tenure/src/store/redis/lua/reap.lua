-- KEYS: members (one key per election). Deletes lapsed registrations;
-- returns how many, per key.
local now = now_us()
local out = {}
for k, key in ipairs(KEYS) do
  local all = redis.call('HGETALL', key)
  local n = 0
  for i = 1, #all, 2 do
    if num(cjson.decode(all[i + 1]).expires_us) <= now then
      redis.call('HDEL', key, all[i])
      n = n + 1
    end
  end
  out[k] = n
end
return out
