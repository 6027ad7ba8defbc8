-- KEYS: lease. Returns {} if the election was never acquired.
local now = now_us()
local r = load(KEYS[1])
if r.term == '' then
  return {}
end
return reply(r, now)
