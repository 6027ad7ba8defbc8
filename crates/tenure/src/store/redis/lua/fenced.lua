-- Fenced writes. KEYS: lease, then one key per write. ARGV: holder, term,
-- then per write: command, argument count, arguments. Every write runs only
-- if the tenure still holds an unexpired lease by this server's TIME; the
-- script is atomic, so no takeover can come in between.
local now = now_us()
local r = load(KEYS[1])
if r.holder ~= ARGV[1] or r.term ~= ARGV[2] or num(r.expires_us) <= now then
  return 0
end
local i = 3
for k = 2, #KEYS do
  local cmd = ARGV[i]
  local n = tonumber(ARGV[i + 1])
  local args = {}
  for j = 1, n do
    args[j] = ARGV[i + 1 + j]
  end
  redis.call(cmd, KEYS[k], unpack(args))
  i = i + 2 + n
end
return 1
