-- Lists dead letters with ids at or after `from`, in id order.
-- KEYS: 1 stream, 2 dead, 3 dead index. ARGV: 1 group, 2 from, 3 count.
-- Reply: { { id, fields of the dead-letter entry }, ... }.
local S, DEAD, DIX = KEYS[1], KEYS[2], KEYS[3]
local G, FROM, COUNT = ARGV[1], ARGV[2], tonumber(ARGV[3])
check(S, G, {})
local out = {}
local members = redis.call('ZRANGEBYLEX', DIX, '[' .. pad(FROM), '+', 'LIMIT', 0, COUNT)
for _, member in ipairs(members) do
  local dead_id = member_dead_id(member)
  local letter = redis.call('XRANGE', DEAD, dead_id, dead_id)
  if letter[1] then
    out[#out + 1] = { member_id(member), letter[1][2] }
  end
end
return out
