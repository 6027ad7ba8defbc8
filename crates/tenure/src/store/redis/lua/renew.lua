-- KEYS: lease. ARGV: holder, term, ttl_us.
local now = now_us()
local r = load(KEYS[1])
if r.holder == ARGV[1] and r.term == ARGV[2] and num(r.expires_us) > now
    and r.handover_to == '' then
  local ttl = tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], 'version', s(num(r.version) + 1), 'ttl_us', s(ttl),
    'renewed_us', s(now), 'expires_us', s(now + ttl))
  return 1
end
return 0
