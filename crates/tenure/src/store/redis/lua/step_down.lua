-- Release (ARGV[3] empty) or hand over. KEYS: lease, history.
-- ARGV: holder, term, handover_to, window_us, reason, channel, index member.
local now = now_us()
local r = load(KEYS[1])
if r.holder ~= ARGV[1] or r.term ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'prev_holder', r.holder, 'holder', '', 'metadata', '',
  'version', s(num(r.version) + 1), 'expires_us', s(now))
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], 'handover_to', ARGV[3],
    'handover_until_us', s(now + tonumber(ARGV[4])), 'handover_reason', ARGV[5])
end
close_term(KEYS[2], tonumber(ARGV[2]), s(now), ARGV[5])
redis.call('PUBLISH', ARGV[6], ARGV[7])
return 1
