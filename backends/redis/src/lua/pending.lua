-- A group's pending list from `from`: entries held by consumers (XPENDING)
-- merged in id order with the owed ones (held by nobody).
-- KEYS: 1 stream, 2 due, 3 owed. ARGV: 1 group, 2 from, 3 count, 4 consumer ('' for all).
-- Reply: { now, { { id, consumer or '', idle ms, times delivered, owed in ms (-1: held) }, ... } }.
local S, DUE, OWED = KEYS[1], KEYS[2], KEYS[3]
local G, FROM, COUNT, CONSUMER = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local now = now_ms()
local held
if CONSUMER == '' then
  held = redis.call('XPENDING', S, G, FROM, '+', COUNT)
else
  held = redis.call('XPENDING', S, G, FROM, '+', COUNT, CONSUMER)
end
local rows = {}
for _, p in ipairs(held) do
  rows[#rows + 1] = { pad(p[1]), { p[1], p[2], p[3], p[4], -1 } }
end
if CONSUMER == '' then
  local from = pad(FROM)
  local owed = redis.call('HGETALL', OWED)
  for i = 1, #owed, 2 do
    local id = owed[i]
    if pad(id) >= from then
      local times, since = string.match(owed[i + 1], '^(%d+) (%d+)$')
      local due = tonumber(redis.call('ZSCORE', DUE, pad(id)) or redis.call('ZSCORE', DUE, id) or now)
      local owed_in = math.max(0, due - now)
      rows[#rows + 1] = { pad(id), { id, '', now - tonumber(since), tonumber(times), owed_in } }
    end
  end
  table.sort(rows, function(a, b) return a[1] < b[1] end)
end
local out = {}
for i = 1, math.min(COUNT, #rows) do
  out[i] = rows[i][2]
end
return { now, out }
