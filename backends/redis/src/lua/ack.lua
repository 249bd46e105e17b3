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
local ids = {}
for i = 2, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
local n = call_chunked({ 'XACK', S, G }, ids)
if n < #ids and redis.call('EXISTS', OWED) == 1 then
  for _, id in ipairs(ids) do
    if redis.call('HDEL', OWED, id) == 1 then
      redis.call('ZREM', DUE, pad(id), id)
      n = n + 1
    end
  end
end
return n
