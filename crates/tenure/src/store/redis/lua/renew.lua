-- KEYS: leases. ARGV: ttl_us, then holder and term per lease. Returns 1 or 0
-- per lease: renewed only if the holder and term are the lease's, it has not
-- expired and no hand-over is requested. One call renews every lease of a
-- process that is due at one instant.
local now = now_us()
local ttl = tonumber(ARGV[1])
local out = {}
for i, key in ipairs(KEYS) do
  local r = load(key)
  if r.holder == ARGV[2 * i] and r.term == ARGV[2 * i + 1] and num(r.expires_us) > now
      and r.handover_to == '' then
    redis.call('HSET', key, 'version', s(num(r.version) + 1), 'ttl_us', s(ttl),
      'renewed_us', s(now), 'expires_us', s(now + ttl))
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
