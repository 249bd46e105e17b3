-- Drops dead letters for good.
-- KEYS: 1 stream, 2 dead, 3 dead index. ARGV: 1 group, 2.. ids.
-- Reply: { how many were dropped }.
local S, DEAD, DIX = KEYS[1], KEYS[2], KEYS[3]
local G = ARGV[1]
check(S, G, { [DEAD] = 'stream', [DIX] = 'zset' })
local members = {}
for _, id in ipairs(distinct_ids(2)) do
  local member = dead_member(DIX, id)
  if member then
    members[#members + 1] = member
  end
end
for _, member in ipairs(members) do
  redis.call('ZREM', DIX, member)
  redis.call('XDEL', DEAD, member_dead_id(member))
end
return { #members }
