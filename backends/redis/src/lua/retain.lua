-- Trims a stream by its retention rule (a length, an age, or both), but
-- never past what a group still needs: entries after a group's last
-- delivered id (not yet read), its pending entries, its owed entries
-- (handed back for another attempt, out of the pending list) and its dead
-- letters (kept so that a redrive can restore them). Retry copies are new
-- entries, so they are after the last delivered id until read.
--
-- KEYS: 1 stream, then for each group named in ARGV: its owed hash and its
-- dead-letter index.
-- ARGV: 1 max length (0: no length rule), 2 max age ms (0: no age rule),
-- then the names of the stream's groups, in KEYS order.
-- Reply: {entries removed, the id trimmed before ('' if nothing)}; -1 in
-- the first place when the stream has a group not named (one made since
-- the caller listed them): nothing is trimmed then.
local S = KEYS[1]
local MAX_LEN, MAX_AGE = tonumber(ARGV[1]), tonumber(ARGV[2])
if redis.call('EXISTS', S) == 0 then
  return {0, ''}
end

-- The rule's cut: entries before it may go. By length it is the oldest
-- entry kept, found from whichever end is nearer: at steady state a pass
-- finds a stream just over its bound, and walks the few entries over it
-- rather than the many it keeps.
local cut = nil
local len = redis.call('XLEN', S)
if MAX_LEN > 0 and len > MAX_LEN then
  local over = len - MAX_LEN
  if over < MAX_LEN then
    local oldest = redis.call('XRANGE', S, '-', '+', 'COUNT', over + 1)
    cut = oldest[#oldest][1]
  else
    local kept = redis.call('XREVRANGE', S, '+', '-', 'COUNT', MAX_LEN)
    cut = kept[#kept][1]
  end
end
if MAX_AGE > 0 then
  local by_age = tostring(math.max(now_ms() - MAX_AGE, 0)) .. '-0'
  if cut == nil or pad(by_age) > pad(cut) then
    cut = by_age
  end
end
if cut == nil then
  return {0, ''}
end

local function keep(id)
  if id and pad(id) < pad(cut) then
    cut = id
  end
end

local named = {}
for i = 3, #ARGV do
  named[ARGV[i]] = i - 2
end
for _, fields in ipairs(redis.call('XINFO', 'GROUPS', S)) do
  local info = {}
  for i = 1, #fields, 2 do
    info[fields[i]] = fields[i + 1]
  end
  local at = named[info['name']]
  if not at then
    return {-1, ''}
  end
  -- Not yet read: everything after the last delivered id (which is kept
  -- too; it costs one entry).
  keep(info['last-delivered-id'])
  if tonumber(info['pending']) > 0 then
    local first = redis.call('XPENDING', S, info['name'], '-', '+', 1)
    if first[1] then
      keep(first[1][1])
    end
  end
  local owed_key, index_key = KEYS[2 * at], KEYS[2 * at + 1]
  for _, id in ipairs(redis.call('HKEYS', owed_key)) do
    keep(id)
  end
  local oldest_dead = redis.call('ZRANGE', index_key, 0, 0)
  if oldest_dead[1] then
    keep(member_id(oldest_dead[1]))
  end
end

return {redis.call('XTRIM', S, 'MINID', cut), cut}
