-- A holder's new metadata, only while its tenure holds unexpired.
-- KEYS: lease. ARGV: holder, term, metadata, channel, index member.
local now = now_us()
local r = load(KEYS[1])
if r.holder ~= ARGV[1] or r.term ~= ARGV[2] or num(r.expires_us) <= now then
  return 0
end
redis.call('HSET', KEYS[1], 'metadata', ARGV[3], 'version', s(num(r.version) + 1))
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
