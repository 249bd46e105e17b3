-- Acknowledges entries: they leave the pending list, or the owed set (an
-- entry owed again is held by nobody, so XACK does not find it). The owed
-- set is only looked at when XACK did not find them all, which is rare:
-- the runtime acks what it holds.
--
-- The keys are checked first, so the call is applied whole or not at all.
--
-- KEYS: 1 stream, 2 due, 3 owed. ARGV: 1 group, 2.. ids.
-- Reply: how many entries were acknowledged.
local S, DUE, OWED = KEYS[1], KEYS[2], KEYS[3]
local G = ARGV[1]
local failure = wrong_type({ [DUE] = 'zset', [OWED] = 'hash' })
if failure then
  return redis.error_reply(failure)
end
-- The ids go from ARGV to XACK in chunks, without a table in between (for
-- 500 ids the copy cost more than the XACK).
local n = 0
for i = 2, #ARGV, CHUNK do
  n = n + redis.call('XACK', S, G, unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
end
if n < #ARGV - 1 and redis.call('EXISTS', OWED) == 1 then
  for i = 2, #ARGV do
    local id = ARGV[i]
    if redis.call('HDEL', OWED, id) == 1 then
      redis.call('ZREM', DUE, pad(id), id)
      n = n + 1
    end
  end
end
return n
