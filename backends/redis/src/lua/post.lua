-- What a plain `XREADGROUP ... >` (the hot path of a `new` read, sent
-- right behind the owed-entries script) leaves to do, for the few entries
-- that need it. The caller found these in the reply:
--
-- ack:  retry copies for other groups, which this group passes over;
-- fix:  this group's own retry copies: their pending records are set to
--       count the original's deliveries too (id, count carried);
-- dead: own copies that reached the attempt bound (id, count carried);
-- back: entries read beyond the request's count (owed entries took the
--       room), or by a read its caller gave up on: handed back, owed at
--       once, as if never read (id, then the delivery count the read left
--       it at). Only while the read's delivery stands: still pending under
--       this consumer at that count. One delivered again since (handed back
--       by a look at the pending list and read anew, or claimed by another
--       consumer) belongs to that delivery now.
--
-- KEYS: 1 stream, 2 due, 3 owed, 4 dead, 5 dead index, 6 wake.
-- ARGV: 1 group, 2 consumer, 3 max deliveries, then the sections, each
--       a name, a length n, and n items (ids; for fix, dead and back, id then count).
-- Reply: { how many entries were handed back, dead-lettered ids, set
-- aside } where an entry set aside is { id, delivery count, reason, error }
-- as in read.lua: a dead letter too big for a script (error '') stays
-- pending for the broker to dead-letter.
local S, DUE, OWED, DEAD, DIX, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local G, C, MAX = ARGV[1], ARGV[2], tonumber(ARGV[3])
check(S, G, { [DUE] = 'zset', [OWED] = 'hash', [DEAD] = 'stream', [DIX] = 'zset', [WAKE] = 'stream' })
local now = now_ms()
local sections = {}
local i = 4
while i <= #ARGV do
  local name, n = ARGV[i], tonumber(ARGV[i + 1])
  local items = {}
  for j = 1, n do
    items[j] = ARGV[i + 1 + j]
  end
  sections[name] = items
  i = i + 2 + n
end

local ack = sections['ack'] or {}
if #ack > 0 then
  call_chunked({ 'XACK', S, G }, ack)
end
local fix = sections['fix'] or {}
for j = 1, #fix, 2 do
  redis.call('XCLAIM', S, G, C, 0, fix[j], 'RETRYCOUNT', tonumber(fix[j + 1]) + 1, 'JUSTID')
end
local buried, aside = {}, {}
local dead = sections['dead'] or {}
for j = 1, #dead, 2 do
  local id, times = dead[j], tonumber(dead[j + 1])
  local e = redis.call('XRANGE', S, id, id)
  local reason = max_reason(times, MAX)
  local letter = dead_fields(id, e[1] and e[1][2] or false, reason, times, now)
  if not fits(letter) then
    aside[#aside + 1] = { id, times, reason, '' }
  else
    local err = bury(DEAD, DIX, id, letter)
    if err then
      aside[#aside + 1] = { id, times, reason, err }
    else
      redis.call('XACK', S, G, id)
      buried[#buried + 1] = id
    end
  end
end
local back = sections['back'] or {}
local n = 0
for j = 1, #back, 2 do
  local id, times = back[j], tonumber(back[j + 1])
  local p = redis.call('XPENDING', S, G, id, id, 1)
  if p[1] and p[1][2] == C and p[1][4] == times then
    redis.call('XACK', S, G, id)
    owe(DUE, OWED, id, now, math.max(0, times - 1), now)
    n = n + 1
  end
end
if n > 0 then
  wake(WAKE, now)
end
return { n, buried, aside }
