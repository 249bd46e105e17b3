-- Deletes a consumer that holds nothing and has been idle long enough:
-- the check and the `XGROUP DELCONSUMER` are one step, so a consumer that
-- reads between them cannot lose the entries it was handed (deleting a
-- consumer drops its pending entries).
--
-- KEYS: 1 stream. ARGV: 1 group, 2 consumer, 3 min idle ms.
-- Reply: 1 if deleted, 0 if not (unknown, holding entries, or not idle
-- long enough).
local S = KEYS[1]
local G, C, MIN_IDLE = ARGV[1], ARGV[2], tonumber(ARGV[3])
check(S, G, {})

for _, fields in ipairs(redis.call('XINFO', 'CONSUMERS', S, G)) do
  local info = {}
  for i = 1, #fields, 2 do
    info[fields[i]] = fields[i + 1]
  end
  if info['name'] == C then
    if tonumber(info['pending']) == 0 and tonumber(info['idle']) >= MIN_IDLE then
      redis.call('XGROUP', 'DELCONSUMER', S, G, C)
      return 1
    end
    return 0
  end
end
return 0
