-- Shared by every tenure script (prepended by scripts.rs). Times are
-- microseconds by this server's TIME, never the client's clock. Numbers are
-- stored as decimal strings written with '%.0f': Lua's default number format
-- would round 16-digit timestamps.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function num(v)
  return tonumber(v) or 0
end
local function s(x)
  return string.format('%.0f', x)
end
local FIELDS = {'holder', 'metadata', 'term', 'version', 'ttl_us', 'acquired_us',
  'renewed_us', 'expires_us', 'handover_to', 'handover_until_us', 'handover_reason',
  'prev_holder', 'prev_expires_us', 'start_reason'}
local function load(key)
  local v = redis.call('HMGET', key, unpack(FIELDS))
  local r = {}
  for i, f in ipairs(FIELDS) do
    r[f] = v[i] or ''
  end
  return r
end
-- The record as a flat array in FIELDS order, then the read time.
local function reply(r, now)
  local out = {}
  for i, f in ipairs(FIELDS) do
    out[i] = r[f]
  end
  out[#FIELDS + 1] = s(now)
  return out
end
local function close_term(hkey, term, end_us, reason)
  local v = redis.call('HGET', hkey, s(term))
  if v then
    local h = cjson.decode(v)
    if h.end_us == '0' then
      h.end_us = end_us
      h.end_reason = reason
      redis.call('HSET', hkey, s(term), cjson.encode(h))
    end
  end
end
-- Registers a member or refreshes its heartbeat, keeping its join time.
local function beat(key, holder, metadata, priority, ttl, now)
  local joined = s(now)
  local v = redis.call('HGET', key, holder)
  if v then
    joined = cjson.decode(v).joined_us
  end
  redis.call('HSET', key, holder, cjson.encode({metadata = metadata,
    priority = priority, joined_us = joined, heartbeat_us = s(now),
    expires_us = s(now + ttl)}))
end
