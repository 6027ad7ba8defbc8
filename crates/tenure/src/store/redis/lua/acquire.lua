-- KEYS: lease, history, index. ARGV: holder, identity, metadata, ttl_us,
-- index member, channel, history retention.
local now = now_us()
local r = load(KEYS[1])
-- A term or version no version of tenure writes (a hand-edited key) is
-- never acquired (MAX_TERM = 2^53 - 1, the largest integer a Lua number
-- keeps exactly); the caller decodes the record and reports it as corrupt.
local function stored_int(v)
  if v == '' then
    return 0
  end
  local n = tonumber(v)
  if n and n >= 0 and n < 9007199254740991 and n == math.floor(n) then
    return n
  end
  return nil
end
local term = stored_int(r.term)
local version = stored_int(r.version)
if term == nil or version == nil then
  return {0, reply(r, now)}
end
local held = r.holder ~= '' and num(r.expires_us) > now
local to = r.handover_to
local allowed = to == '' or to == '*' or to == ARGV[2] or num(r.handover_until_us) <= now
if held or not allowed then
  if term == 0 then
    return {0, {}}
  end
  return {0, reply(r, now)}
end
local reason
if term == 0 then
  reason = 'first'
elseif r.holder == '' and r.handover_reason ~= '' then
  reason = r.handover_reason
elseif r.holder == '' then
  reason = 'release'
else
  reason = 'expiry'
end
local prev = r.holder
local prev_expires = r.expires_us
if prev_expires == '' then
  prev_expires = '0'
end
term = term + 1
local ttl = tonumber(ARGV[4])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'metadata', ARGV[3], 'term', s(term),
  'version', s(version + 1), 'ttl_us', s(ttl), 'acquired_us', s(now),
  'renewed_us', s(now), 'expires_us', s(now + ttl), 'handover_to', '',
  'handover_until_us', '0', 'handover_reason', '', 'prev_holder', prev,
  'prev_expires_us', prev_expires, 'start_reason', reason)
redis.call('HSET', KEYS[2], s(term), cjson.encode({holder = ARGV[1],
  start_reason = reason, start_us = s(now), end_reason = '', end_us = '0'}))
if prev ~= '' then
  close_term(KEYS[2], term - 1, prev_expires, 'expired')
end
local keep = tonumber(ARGV[7])
if redis.call('HLEN', KEYS[2]) > keep then
  local terms = redis.call('HKEYS', KEYS[2])
  local nums = {}
  for i, t in ipairs(terms) do
    nums[i] = tonumber(t)
  end
  table.sort(nums)
  for i = 1, #nums - keep do
    redis.call('HDEL', KEYS[2], s(nums[i]))
  end
end
redis.call('SADD', KEYS[3], ARGV[5])
redis.call('PUBLISH', ARGV[6], ARGV[5])
return {1, reply(load(KEYS[1]), now)}
