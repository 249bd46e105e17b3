-- Hands pending entries back for another attempt.
--
-- `copy`: appends a copy addressed to the group (fields `rs:group`,
-- `rs:count` = deliveries so far, then the entry's own fields) and acks the
-- original, in one step.
-- `after`: takes the entry out of the pending list into the group's owed
-- set, due `delay` ms from now (0: at once), remembering its delivery count;
-- the next read hands it out again under the same id. Taking it out of the
-- pending list is what keeps idle claims from taking it before it is due.
--
-- KEYS: 1 stream, 2 due, 3 owed, 4 wake.
-- ARGV: 1 group, 2 how (copy | after), 3 delay ms, 4.. ids.
-- Reply: { retried count, ids dropped because the stream no longer holds them }.
local S, DUE, OWED, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local G, HOW = ARGV[1], ARGV[2]
local DELAY = tonumber(ARGV[3])
check_group(S, G)
local now = now_ms()
local n, dropped = 0, {}

-- The delivery count of a pending id, taking it out of the pending list
-- (or out of the owed set); nil if the group does not hold it.
local function take(id)
  local p = redis.call('XPENDING', S, G, id, id, 1)
  if p[1] then
    redis.call('XACK', S, G, id)
    return p[1][4]
  end
  local times = owed_record(OWED, id)
  if times then
    redis.call('ZREM', DUE, id)
    redis.call('HDEL', OWED, id)
    return times
  end
  return nil
end

for i = 4, #ARGV do
  local id = ARGV[i]
  local times = take(id)
  if times then
    if HOW == 'copy' then
      local e = redis.call('XRANGE', S, id, id)
      if e[1] then
        local args = { 'rs:group', G, 'rs:count', tostring(times) }
        for _, v in ipairs(user_fields(e[1][2])) do
          args[#args + 1] = v
        end
        redis.call('XADD', S, '*', unpack(args))
        n = n + 1
      else
        dropped[#dropped + 1] = id
      end
    else
      redis.call('ZADD', DUE, now + DELAY, id)
      redis.call('HSET', OWED, id, times .. ' ' .. now)
      n = n + 1
    end
  end
end
if HOW == 'after' and n > 0 then
  wake(WAKE, now)
end
return { n, dropped }
