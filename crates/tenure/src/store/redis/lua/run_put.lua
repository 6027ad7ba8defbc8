-- KEYS: the run record (hash), the election's record index (sorted set:
-- name -> when last written). ARGV: name, value, expected version, keep
-- (ms), the key prefix of the election's records. Returns {} if the
-- record's version is not the expected one (an expired record is gone, so
-- its version is 0), else {version, updated_us}.
local now = now_us()
local current = num(redis.call('HGET', KEYS[1], 'version'))
if current ~= num(ARGV[3]) then
  return {}
end
local version = current + 1
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'version', s(version), 'updated_us', s(now))
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], s(now), ARGV[1])
-- The index lives as long as its longest-kept record (PTTL -1: none yet).
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
-- Forget the index entries of records Redis expired: the oldest hundred
-- are looked at on each write, which keeps every write's work bounded.
for _, n in ipairs(redis.call('ZRANGE', KEYS[2], 0, 99)) do
  if redis.call('EXISTS', ARGV[5] .. n) == 0 then
    redis.call('ZREM', KEYS[2], n)
  end
end
return {s(version), s(now)}
