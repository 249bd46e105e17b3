-- Moves a group's cursor (`XGROUP SETID`) and forgets the owed records of
-- the entries past it: the group reads those again as new, as it does the
-- entries it has pending there, so that none is both owed and read anew
-- (handed out twice, or claimed from its holder when its delay passes).
--
-- The keys and the group are checked first; `XGROUP SETID` is the first
-- write, so a failure changes nothing.
--
-- KEYS: 1 stream, 2 due, 3 owed. ARGV: 1 group, 2 the new position ('$',
-- '0' or an id).
-- Reply: how many owed records it forgot.
local S, DUE, OWED = KEYS[1], KEYS[2], KEYS[3]
local G, POS = ARGV[1], ARGV[2]
check(S, G, { [DUE] = 'zset', [OWED] = 'hash' })
redis.call('XGROUP', 'SETID', S, G, POS)
if POS == '$' then
  -- Every owed entry was delivered, so none is past the stream's end.
  return 0
end
local from = pad(POS)
local past = {}
for _, id in ipairs(redis.call('HKEYS', OWED)) do
  if pad(id) > from then
    past[#past + 1] = id
  end
end
for _, id in ipairs(past) do
  forget_owed(DUE, OWED, id)
end
return #past
