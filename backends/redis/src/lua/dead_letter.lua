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

local plans = {}
for _, id in ipairs(distinct_ids(first)) do
  local plan = { id = id }
  plan.times, plan.held = delivered(S, G, OWED, id)
  if plan.times then
    local e = redis.call('XRANGE', S, id, id)[1]
    plan.fields = dead_fields(id, e and e[2] or false, REASON, TIMES or plan.times, now)
    plans[#plans + 1] = plan
  end
end
local big = plan_appends(DEAD, plans, pre)
if big then
  return big
end

local n, used = 0, {}
for _, plan in ipairs(plans) do
  if not plan.skip then
    local dead_id = plan.appended
    if dead_id then
      used[dead_id] = true
    else
      dead_id = redis.call('XADD', DEAD, '*', unpack(plan.fields))
    end
    redis.call('ZADD', DIX, 0, index_member(plan.id, dead_id))
    if plan.held then
      redis.call('XACK', S, G, plan.id)
    else
      forget_owed(DUE, OWED, plan.id)
    end
    n = n + 1
  end
end
drop_unused(DEAD, pre_all, used)
return { n }
