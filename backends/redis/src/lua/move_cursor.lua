-- Moves a group's cursor forward (`XGROUP SETID`) without passing over a
-- retry still to run: the group's retry copies among the candidate ids
-- (the broker found them between the cursor and the target, in pages,
-- before this call) that the group has not read since are made owed at
-- once, with the count they carry, as the local brokers do. A copy is the
-- only record of its retry: passed over, the retry would be lost.
--
-- All checks come first; then every write, none of which can fail.
--
-- KEYS: 1 stream, 2 due, 3 owed, 4 wake.
-- ARGV: 1 group, 2 target id, then the candidate ids.
-- Reply: how many copies were made owed.
local S, DUE, OWED, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local G, TARGET = ARGV[1], ARGV[2]
check(S, G, { [DUE] = 'zset', [OWED] = 'hash', [WAKE] = 'stream' })

-- The group's cursor now: a read since the broker's scan may have moved
-- it past some candidates, which the group has then read.
local cursor = '0-0'
for _, row in ipairs(redis.call('XINFO', 'GROUPS', S)) do
  local name, last
  for i = 1, #row, 2 do
    if row[i] == 'name' then
      name = row[i + 1]
    elseif row[i] == 'last-delivered-id' then
      last = row[i + 1]
    end
  end
  if name == G then
    cursor = last
  end
end

local now = now_ms()
local after, upto = pad(cursor), pad(TARGET)
local owed = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local p = pad(id)
  if p > after and p <= upto
    and not redis.call('XPENDING', S, G, id, id, 1)[1]
    and redis.call('HEXISTS', OWED, id) == 0 then
    local e = redis.call('XRANGE', S, id, id)[1]
    if e and copy_group(e[2]) == G then
      owed[#owed + 1] = { id, carried(e[2]) }
    end
  end
end

for _, o in ipairs(owed) do
  owe(DUE, OWED, o[1], now, o[2], now)
end
redis.call('XGROUP', 'SETID', S, G, TARGET)
if #owed > 0 then
  wake(WAKE, now)
end
return #owed
