-- Hands pending (or owed) entries back for another attempt.
--
-- `copy`: appends a copy addressed to the group (fields `rs:group`,
-- `rs:count` = deliveries so far, `rs:orig` = the first original's id, then
-- the entry's own fields) and acks the original, in one step. A copy too
-- big for a script is appended by the broker (see `plan_appends`).
-- `after`: takes the entry out of the pending list into the group's owed
-- set, due `delay` ms from now (0: at once), remembering its delivery count;
-- the next read hands it out again under the same id. Taking it out of the
-- pending list is what keeps idle claims from taking it before it is due.
--
-- All checks and reads come first; then every write, none of which can
-- fail: the call is applied whole or not at all.
--
-- KEYS: 1 stream, 2 due, 3 owed, 4 wake.
-- ARGV: 1 group, 2 how (copy | after), 3 delay ms, 4 K, 5..4+K precopied
--       ids, then the ids to retry.
-- Reply: { retried count, ids dropped because the stream no longer holds
-- them } or the 'big' reply of `plan_appends`.
local S, DUE, OWED, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local G, HOW = ARGV[1], ARGV[2]
local DELAY = tonumber(ARGV[3])
local pre, pre_all, first, failure = begin_settle(S, 4, S, G, {
  [DUE] = 'zset', [OWED] = 'hash', [WAKE] = 'stream',
})
if failure then
  return redis.error_reply(failure)
end
local now = now_ms()

-- Reads: who holds each id, its count, and its fields. Another group's
-- retry copy held here (a lost read's stray, handed back) is passed over:
-- acked, as a read passes it over, never owed or copied for this group.
local plans = delivered_plans(S, G, OWED, first, function(plan, fields)
  local group = fields and copy_group(fields)
  if group and group ~= G then
    plan.foreign = true
    return
  end
  if fields and plan.held then
    plan.times = own_count(G, fields, plan.times)
  end
  if HOW == 'copy' then
    if fields then
      plan.fields = copy_fields(G, plan.times, original_of(plan.id, fields), fields)
    else
      plan.dropped = true
    end
  end
end)
local big = plan_appends(S, plans, pre)
if big then
  return big
end

-- Writes: the copy first, then the original leaves the pending list.
local dropped = {}
local passed = 0
local written, used = write_plans(plans, function(plan)
  local id = plan.id
  if plan.foreign then
    release(S, G, DUE, OWED, id, plan.held)
    passed = passed + 1
  elseif HOW == 'copy' then
    if plan.fields and not plan.appended then
      redis.call('XADD', S, '*', unpack(plan.fields))
    end
    release(S, G, DUE, OWED, id, plan.held)
    if plan.dropped then
      dropped[#dropped + 1] = id
    end
  else
    if plan.held then
      redis.call('XACK', S, G, id)
    end
    owe(DUE, OWED, id, now + DELAY, plan.times, now)
  end
end)
local n = written - #dropped - passed
drop_unused(S, pre_all, used)
if HOW == 'after' and n > 0 then
  wake(WAKE, now)
end
return { n, dropped }
