-- KEYS: the election's record index. ARGV: the key prefix of the election's
-- records, the most to return. Returns {name, value, version, updated_us,
-- ...}, most recently written first, skipping records Redis expired.
local out = {}
local limit = tonumber(ARGV[2])
if limit <= 0 then
  return out
end
for _, n in ipairs(redis.call('ZREVRANGE', KEYS[1], 0, -1)) do
  local r = redis.call('HMGET', ARGV[1] .. n, 'value', 'version', 'updated_us')
  if r[2] then
    out[#out + 1] = n
    out[#out + 1] = r[1] or ''
    out[#out + 1] = r[2]
    out[#out + 1] = r[3] or '0'
    if #out >= limit * 4 then
      break
    end
  end
end
return out
