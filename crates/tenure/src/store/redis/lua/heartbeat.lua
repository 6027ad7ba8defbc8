-- KEYS: members. ARGV: ttl_us, then holder, metadata and priority per member.
local now = now_us()
for i, key in ipairs(KEYS) do
  beat(key, ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1], tonumber(ARGV[1]), now)
end
return #KEYS
