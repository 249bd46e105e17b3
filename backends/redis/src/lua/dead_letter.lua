-- Dead-letters pending (or owed) entries with a reason: each becomes an
-- entry of the group's dead-letter stream (see `dead_fields`) and an index
-- member, and leaves the pending list (or the owed set). A dead letter too
-- big for a script is appended by the broker (see `plan_appends`).
--
-- All checks and reads come first; then every write, none of which can
-- fail: the call is applied whole or not at all.
--
-- KEYS: 1 stream, 2 due, 3 owed, 4 dead, 5 dead index.
-- ARGV: 1 group, 2 reason, 3 delivery count to record ('' for the count
--       the group has: the read scripts pass the count they saw before a
--       claim bumped it), 4 K, 5..4+K precopied ids, then the ids.
-- Reply: { dead-lettered count } or the 'big' reply of `plan_appends`.
local S, DUE, OWED, DEAD, DIX = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local G, REASON, TIMES = ARGV[1], ARGV[2], tonumber(ARGV[3])
local pre, pre_all, first, failure = begin_settle(DEAD, 4, S, G, {
  [DUE] = 'zset', [OWED] = 'hash', [DEAD] = 'stream', [DIX] = 'zset',
})
if failure then
  return redis.error_reply(failure)
end
local now = now_ms()

local plans = delivered_plans(S, G, OWED, first, function(plan, fields)
  plan.fields = dead_fields(plan.id, fields, REASON, TIMES or plan.times, now)
end)
local big = plan_appends(DEAD, plans, pre)
if big then
  return big
end

local n, used = write_plans(plans, function(plan)
  local dead_id = plan.appended or redis.call('XADD', DEAD, '*', unpack(plan.fields))
  index_dead(DEAD, DIX, plan.id, dead_id)
  release(S, G, DUE, OWED, plan.id, plan.held)
end)
drop_unused(DEAD, pre_all, used)
return { n }
