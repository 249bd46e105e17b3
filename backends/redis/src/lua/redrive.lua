-- Makes dead letters owed again with their delivery counts reset. An entry
-- the stream still holds is owed under its own id; one trimmed away since
-- is appended again from the dead letter's copy of its fields, as a retry
-- copy for the group (read as new, behind later entries). So is a retry
-- copy of the group's that carries earlier deliveries (`rs:count` > 0): its
-- fields cannot be changed in place, and the count they carry would be
-- added to its next deliveries (see `own_count`), so a fresh copy counting
-- 0 takes its place and the old one is deleted (only this group reads it).
-- A copy too big for a script is appended by the broker (see
-- `plan_appends`).
--
-- A dead letter with no copy of its fields (its entry was trimmed before it
-- was dead-lettered) whose entry is gone cannot be redriven: the call then
-- changes nothing and replies { 'lost', ids }.
--
-- All checks and reads come first; then every write, none of which can
-- fail: the call is applied whole or not at all.
--
-- KEYS: 1 stream, 2 due, 3 owed, 4 dead, 5 dead index, 6 wake.
-- ARGV: 1 group, 2 K, 3..2+K precopied ids, then the ids.
-- Reply: { redriven count }, { 'lost', ids } or the 'big' reply of
-- `plan_appends`.
local S, DUE, OWED, DEAD, DIX, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local G = ARGV[1]
local pre, pre_all, first, failure = begin_settle(S, 2, S, G, {
  [DUE] = 'zset', [OWED] = 'hash', [DEAD] = 'stream', [DIX] = 'zset', [WAKE] = 'stream',
})
if failure then
  return redis.error_reply(failure)
end
local now = now_ms()

local function is_lost(fields)
  for i = 1, #fields, 2 do
    if fields[i] == 'rs:lost' then
      return true
    end
  end
  return false
end

local plans, lost = {}, {}
for _, id in ipairs(distinct_ids(first)) do
  local member = dead_member(DIX, id)
  if member then
    local plan = { id = id, member = member, dead_id = member_dead_id(member) }
    local entry = redis.call('XRANGE', S, id, id)[1]
    if entry and copy_group(entry[2]) == G and carried(entry[2]) > 0 then
      plan.fields = copy_fields(G, 0, original_of(id, entry[2]), entry[2])
      plan.replaces = true
    elseif not entry then
      local letter = redis.call('XRANGE', DEAD, plan.dead_id, plan.dead_id)[1]
      if not letter or is_lost(letter[2]) then
        lost[#lost + 1] = id
      else
        local orig = id
        for j = 1, #letter[2], 2 do
          if letter[2][j] == 'rs:orig' then
            orig = letter[2][j + 1]
            break
          end
        end
        plan.fields = copy_fields(G, 0, orig, letter[2])
      end
    end
    plans[#plans + 1] = plan
  end
end
if #lost > 0 then
  drop_unused(S, pre_all, {})
  return { 'lost', lost }
end
local big = plan_appends(S, plans, pre)
if big then
  return big
end

local n, used = write_plans(plans, function(plan)
  if plan.fields and not plan.appended then
    redis.call('XADD', S, '*', unpack(plan.fields))
  elseif not plan.fields then
    owe(DUE, OWED, plan.id, now, 0, now)
  end
  if plan.replaces then
    redis.call('XDEL', S, plan.id)
  end
  redis.call('ZREM', DIX, plan.member)
  redis.call('XDEL', DEAD, plan.dead_id)
end)
drop_unused(S, pre_all, used)
if n > 0 then
  wake(WAKE, now)
end
return { n }
