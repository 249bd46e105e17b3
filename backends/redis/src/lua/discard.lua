-- Drops dead letters for good.
-- KEYS: 1 stream, 2 dead, 3 dead index. ARGV: 1 group, 2.. ids.
-- Reply: how many were dropped.
local S, DEAD, DIX = KEYS[1], KEYS[2], KEYS[3]
local G = ARGV[1]
check_group(S, G)
local n = 0
for i = 2, #ARGV do
  local member = dead_member(DIX, ARGV[i])
  if member then
    redis.call('ZREM', DIX, member)
    redis.call('XDEL', DEAD, member_dead_id(member))
    n = n + 1
  end
end
return n
