-- Dead-letters pending (or owed) entries with a reason.
-- KEYS: 1 stream, 2 due, 3 owed, 4 dead, 5 dead index.
-- ARGV: 1 group, 2 reason, 3.. ids. Reply: how many were dead-lettered.
local S, DUE, OWED, DEAD, DIX = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local G, REASON = ARGV[1], ARGV[2]
check_group(S, G)
local now = now_ms()
local n = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local times
  local p = redis.call('XPENDING', S, G, id, id, 1)
  if p[1] then
    times = p[1][4]
    redis.call('XACK', S, G, id)
  else
    times = owed_record(OWED, id)
    if times then
      redis.call('ZREM', DUE, id)
      redis.call('HDEL', OWED, id)
    end
  end
  if times then
    local e = redis.call('XRANGE', S, id, id)
    bury(DEAD, DIX, id, e[1] and e[1][2] or false, REASON, times, now)
    n = n + 1
  end
end
return n
