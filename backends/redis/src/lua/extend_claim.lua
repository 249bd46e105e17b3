-- Refreshes a consumer's claim on entries it holds: each one's idle time
-- starts again from now, its delivery count stays (nothing was delivered).
-- `XCLAIM ... 0 ... JUSTID` to the consumer already holding the entry does
-- exactly that: JUSTID leaves the count alone, and the delivery time
-- becomes now.
--
-- Only ids pending under this consumer are claimed: XCLAIM would take an
-- entry from another consumer. Owed entries are not in the pending list
-- (they are held by nobody), so they are passed over too. An entry no
-- longer in the stream (trimmed while pending) is passed over as well:
-- XCLAIM would drop it from the pending list (Redis 7.0 and later), which
-- is a read's job, with its log line.
--
-- All checks and reads come first; then the claims, which cannot fail: the
-- call is applied whole or not at all.
--
-- KEYS: 1 stream. ARGV: 1 group, 2 consumer, 3.. ids.
-- Reply: how many claims were refreshed.
local S = KEYS[1]
local G, C = ARGV[1], ARGV[2]
check(S, G, {})

local held = {}
for _, id in ipairs(distinct_ids(3)) do
  local p = redis.call('XPENDING', S, G, id, id, 1, C)
  if p[1] and redis.call('XRANGE', S, id, id)[1] then
    held[#held + 1] = id
  end
end

-- XCLAIM replies with the ids it claimed, so this counts them rather than
-- summing integers (as `call_chunked` does).
local n = 0
for i = 1, #held, CHUNK do
  local cmd = { 'XCLAIM', S, G, C, 0 }
  for j = i, math.min(i + CHUNK - 1, #held) do
    cmd[#cmd + 1] = held[j]
  end
  cmd[#cmd + 1] = 'JUSTID'
  n = n + #redis.call(unpack(cmd))
end
return n
