-- KEYS: index. ARGV: lease key prefix. Returns {member, record} pairs.
local now = now_us()
local out = {}
for _, m in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local r = load(ARGV[1] .. m)
  if r.term ~= '' then
    out[#out + 1] = m
    out[#out + 1] = reply(r, now)
  end
end
return out
