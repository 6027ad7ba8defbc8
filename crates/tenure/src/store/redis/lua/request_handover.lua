-- KEYS: lease. ARGV: handover_to, window_us, reason, channel, index member.
local now = now_us()
local r = load(KEYS[1])
if r.holder == '' or num(r.expires_us) <= now then
  return {}
end
redis.call('HSET', KEYS[1], 'handover_to', ARGV[1],
  'handover_until_us', s(now + tonumber(ARGV[2])), 'handover_reason', ARGV[3],
  'version', s(num(r.version) + 1))
redis.call('PUBLISH', ARGV[4], ARGV[5])
return reply(load(KEYS[1]), now)
