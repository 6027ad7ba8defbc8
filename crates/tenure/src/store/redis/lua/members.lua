-- KEYS: members. Returns {now, holder, json, holder, json, ...}.
local out = {s(now_us())}
for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do
  out[#out + 1] = v
end
return out
