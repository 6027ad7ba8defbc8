-- KEYS: members, lease, members, lease, ... (two keys per election).
-- Deletes lapsed registrations, never the one of the unexpired lease's
-- holder (a leader does not heartbeat: its lease vouches for it); returns
-- how many, per election.
local now = now_us()
local out = {}
for k = 1, #KEYS, 2 do
  local lease = redis.call('HMGET', KEYS[k + 1], 'holder', 'expires_us')
  local holder = ''
  if lease[1] and num(lease[2] or '0') > now then
    holder = lease[1]
  end
  local all = redis.call('HGETALL', KEYS[k])
  local n = 0
  for i = 1, #all, 2 do
    if all[i] ~= holder and num(cjson.decode(all[i + 1]).expires_us) <= now then
      redis.call('HDEL', KEYS[k], all[i])
      n = n + 1
    end
  end
  out[#out + 1] = n
end
return out
