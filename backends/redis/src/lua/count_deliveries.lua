-- Counts deliveries a consumer made without a read (a `by_key` lane running
-- a held entry again): each entry it holds gets its delivery count raised
-- to the given one (never lowered) and its delivery time set to now, as a
-- read's delivery would. `XCLAIM ... 0 <id> RETRYCOUNT <n> JUSTID` to the
-- consumer already holding the entry does exactly that.
--
-- Passed over, as in extend_claim.lua: ids not pending under this consumer
-- (XCLAIM would take an entry from another consumer), owed entries (held by
-- nobody) and entries no longer in the stream (XCLAIM would drop them from
-- the pending list, which is a read's job). An id named twice counts with
-- the higher count.
--
-- All checks and reads come first; then the claims, which cannot fail: the
-- call is applied whole or not at all.
--
-- KEYS: 1 stream. ARGV: 1 group, 2 consumer, 3.. pairs of id, count.
-- Reply: how many entries were counted.
local S = KEYS[1]
local G, C = ARGV[1], ARGV[2]
check(S, G, {})

local wanted, order = {}, {}
for i = 3, #ARGV - 1, 2 do
  local id, times = ARGV[i], tonumber(ARGV[i + 1])
  if wanted[id] == nil then
    order[#order + 1] = id
    wanted[id] = times
  elseif times > wanted[id] then
    wanted[id] = times
  end
end

local held = {}
for _, id in ipairs(order) do
  local p = redis.call('XPENDING', S, G, id, id, 1, C)
  if p[1] and redis.call('XRANGE', S, id, id)[1] then
    held[#held + 1] = { id, math.max(wanted[id], p[1][4]) }
  end
end

for _, h in ipairs(held) do
  redis.call('XCLAIM', S, G, C, 0, h[1], 'RETRYCOUNT', h[2], 'JUSTID')
end
return #held
