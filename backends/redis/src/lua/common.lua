-- Helpers shared by every ruststream script. Each script is this file
-- followed by its own body (see scripts.rs), so these are plain locals.
--
-- Times are the server's clock (TIME), in milliseconds: every worker of a
-- group then agrees on when a delayed entry falls due.
--
-- A script that fails is not rolled back: whatever it wrote before the
-- failure stays. So every script reads and checks first and writes last,
-- and nothing it writes afterwards can fail (the keys were checked to have
-- the right types, and no write passes more values than Lua can).

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Lua's `unpack`, and so any command a script builds from a table, stops
-- near 8000 values (the C stack limit of Redis's Lua). An XADD that would
-- pass more than this is made by the broker instead (see `plan_appends`).
local MAX_CALL_VALUES = 7000
-- Ids passed to one variadic command (XACK, ZREM, XDEL) at a time.
local CHUNK = 1000

-- An id `ms-seq` as fixed-width text, so that ids sort as text the way
-- they sort as numbers (due set and dead-letter index members, merges).
local function pad(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then
    ms, seq = id, '0'
  end
  return string.rep('0', 20 - #ms) .. ms .. '-' .. string.rep('0', 20 - #seq) .. seq
end

-- The id a padded id stands for.
local function unpad(p)
  local ms = string.gsub(string.sub(p, 1, 20), '^0+', '')
  local seq = string.gsub(string.sub(p, 22, 41), '^0+', '')
  if ms == '' then ms = '0' end
  if seq == '' then seq = '0' end
  return ms .. '-' .. seq
end

-- The id of a due set member: padded (`pad`, so that entries due at the
-- same time come back in id order, not text order), or the plain id a
-- broker before the padded layout wrote.
local function due_id(member)
  if #member == 41 and string.match(member, '^%d+%-%d+$') then
    return unpad(member)
  end
  return member
end

-- Calls `head` followed by `items`, CHUNK items at a time, and sums the
-- integer replies.
local function call_chunked(head, items)
  local total = 0
  for i = 1, #items, CHUNK do
    local args = {}
    for j = 1, #head do
      args[j] = head[j]
    end
    for j = i, math.min(i + CHUNK - 1, #items) do
      args[#args + 1] = items[j]
    end
    total = total + redis.call(unpack(args))
  end
  return total
end

-- The fields of an entry that are not ruststream metadata (`rs:` fields).
local function user_fields(fields)
  local out = {}
  if not fields then
    return out
  end
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 3) ~= 'rs:' then
      out[#out + 1] = fields[i]
      out[#out + 1] = fields[i + 1]
    end
  end
  return out
end

-- The group a retry copy is addressed to, or nil for an ordinary entry.
-- Copies are written with `rs:group` first, so one comparison decides.
local function copy_group(fields)
  if fields and fields[1] == 'rs:group' then
    return fields[2]
  end
  return nil
end

-- The delivery count a retry copy carries (0 for an ordinary entry).
local function carried(fields)
  if fields and fields[1] == 'rs:group' and fields[3] == 'rs:count' then
    return tonumber(fields[4]) or 0
  end
  return 0
end

-- The id of the entry that `id` (with `fields`) stands for: a retry copy
-- carries its first original's id in `rs:orig` (a copy written before
-- copies carried it stands for itself).
local function original_of(id, fields)
  if fields and fields[1] == 'rs:group' and fields[5] == 'rs:orig' then
    return fields[6]
  end
  return id
end

-- The fields of a retry copy of an entry (`rs:group`, `rs:count`, `rs:orig`
-- first, then the entry's own fields).
local function copy_fields(group, times, orig, fields)
  local args = { 'rs:group', group, 'rs:count', tostring(times), 'rs:orig', orig }
  for _, v in ipairs(user_fields(fields)) do
    args[#args + 1] = v
  end
  return args
end

-- The fields of a dead letter: the id the group held, the reason, the
-- delivery count, the time, the original's id, then the entry's own fields
-- (so it can be redriven after the stream is trimmed), or `rs:lost` when
-- the stream no longer held the entry.
local function dead_fields(id, fields, reason, times, now)
  local args = {
    'rs:id', id,
    'rs:reason', reason,
    'rs:times_delivered', tostring(times),
    'rs:dead_at', tostring(now),
    'rs:orig', original_of(id, fields),
  }
  if fields then
    for _, v in ipairs(user_fields(fields)) do
      args[#args + 1] = v
    end
  else
    args[#args + 1] = 'rs:lost'
    args[#args + 1] = '1'
  end
  return args
end

-- Whether a script can XADD `fields` itself.
local function fits(fields)
  return #fields + 3 <= MAX_CALL_VALUES
end

-- The index member of a dead letter: `<padded id>:<dead-letter stream id>`.
local function index_member(id, dead_id)
  return pad(id) .. ':' .. dead_id
end

-- The dead-letter index member of `id`, or nil.
local function dead_member(index_key, id)
  local p = pad(id)
  local found = redis.call('ZRANGEBYLEX', index_key, '[' .. p .. ':', '(' .. p .. ';', 'LIMIT', 0, 1)
  return found[1]
end

-- The dead-letter stream id inside an index member.
local function member_dead_id(member)
  return string.sub(member, 43)
end

-- The original id inside an index member.
local function member_id(member)
  return unpad(string.sub(member, 1, 41))
end

-- Indexes `dead_id` as the dead letter of `id`. An entry has one dead
-- letter at most: one it has already (dead-lettered again after its
-- group's cursor moved back over it) is replaced, its dead-letter stream
-- entry deleted. Cannot fail once the keys' types are checked.
local function index_dead(dead_key, index_key, id, dead_id)
  local old = dead_member(index_key, id)
  if old then
    redis.call('ZREM', index_key, old)
    redis.call('XDEL', dead_key, member_dead_id(old))
  end
  redis.call('ZADD', index_key, 0, index_member(id, dead_id))
end

-- Records a dead letter whose fields fit a script (`fits`), returning nil
-- or the error the server gave.
local function bury(dead_key, index_key, id, fields)
  local dead_id = redis.pcall('XADD', dead_key, '*', unpack(fields))
  if type(dead_id) == 'table' then
    return dead_id.err or 'XADD failed'
  end
  index_dead(dead_key, index_key, id, dead_id)
  return nil
end

-- Wakes the group's blocked readers (they wait on this stream with XREAD).
local function wake(wake_key, now)
  redis.call('XADD', wake_key, 'MAXLEN', 1, '*', 'at', tostring(now))
end

-- The owed record of `id`: times delivered and when it became owed.
local function owed_record(owed_key, id)
  local rec = redis.call('HGET', owed_key, id)
  if not rec then
    return nil
  end
  local times, since = string.match(rec, '^(%d+) (%d+)$')
  return tonumber(times) or 0, tonumber(since) or 0
end

-- How many times the group delivered `id`, and true when a consumer holds
-- it (nil when it is owed); nil when the group has it neither way.
local function delivered(stream, group, owed_key, id)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  if p[1] then
    return p[1][4], true
  end
  return owed_record(owed_key, id), nil
end

-- How many times the group delivered `id`, a pending entry of `fields`
-- counted `times` times by the server. A retry copy of the group's own is
-- counted from the deliveries its original had (`rs:count`): a read that
-- hands one out sets its count so (post.lua's `fix`), but a read whose
-- reply was lost never got that far, and its count started again at 1.
local function own_count(group, fields, times)
  if copy_group(fields) == group and times <= carried(fields) then
    return times + carried(fields)
  end
  return times
end

-- The ids in ARGV from `first` on, each once: a call may name an id twice,
-- and must settle it once.
local function distinct_ids(first, last)
  local ids, seen = {}, {}
  for i = first, last or #ARGV do
    if not seen[ARGV[i]] then
      seen[ARGV[i]] = true
      ids[#ids + 1] = ARGV[i]
    end
  end
  return ids
end

-- Refreshes consumer `c`'s claim on those of `ids` pending under it: each
-- one's idle time starts again from now, its delivery count stays
-- (nothing was delivered). `XCLAIM ... 0 ... JUSTID` to the consumer
-- already holding the entry does exactly that: JUSTID leaves the count
-- alone, and the delivery time becomes now.
--
-- Only ids pending under `c` are claimed: XCLAIM would take an entry from
-- another consumer. Owed entries are not in the pending list (they are
-- held by nobody), so they are passed over too. An entry no longer in the
-- stream (trimmed while pending) is passed over as well: XCLAIM would drop
-- it from the pending list (Redis 7.0 and later), which is a read's job,
-- with its log line.
--
-- All checks come first; then the claims, which cannot fail. Returns how
-- many claims were refreshed (XCLAIM replies with the ids it claimed, so
-- this counts them rather than summing integers, as `call_chunked` does).
local function refresh_claims(stream, group, c, ids)
  local held = {}
  for _, id in ipairs(ids) do
    local p = redis.call('XPENDING', stream, group, id, id, 1, c)
    if p[1] and redis.call('XRANGE', stream, id, id)[1] then
      held[#held + 1] = id
    end
  end
  local n = 0
  for i = 1, #held, CHUNK do
    local cmd = { 'XCLAIM', stream, group, c, 0 }
    for j = i, math.min(i + CHUNK - 1, #held) do
      cmd[#cmd + 1] = held[j]
    end
    cmd[#cmd + 1] = 'JUSTID'
    n = n + #redis.call(unpack(cmd))
  end
  return n
end

-- Makes `id` owed from `due`, with its delivery count.
local function owe(due_key, owed_key, id, due, times, since)
  redis.call('ZREM', due_key, id)
  redis.call('ZADD', due_key, due, pad(id))
  redis.call('HSET', owed_key, id, times .. ' ' .. since)
end

-- Forgets that `id` is owed (under either member layout).
local function forget_owed(due_key, owed_key, id)
  redis.call('ZREM', due_key, pad(id), id)
  redis.call('HDEL', owed_key, id)
end

-- Takes a settled entry out of the group: acks it when a consumer holds it
-- (`held`), otherwise forgets that it is owed.
local function release(stream, group, due_key, owed_key, id, held)
  if held then
    redis.call('XACK', stream, group, id)
  else
    forget_owed(due_key, owed_key, id)
  end
end

local function max_reason(times, max)
  return 'delivered ' .. times .. ' times, reaching max_deliveries(' .. max .. ')'
end

-- Why a side key cannot be used, or nil: each must be missing or of its
-- type (a key another client overwrote would fail a write half-way).
-- `types` maps key names to 'zset', 'hash' or 'stream'.
local function wrong_type(types)
  for key, want in pairs(types) do
    local got = redis.call('TYPE', key).ok
    if got ~= 'none' and got ~= want then
      return 'WRONGTYPE ' .. key .. ' holds a ' .. got .. ', not the ' .. want
        .. ' ruststream keeps there; delete it or move it away'
    end
  end
  return nil
end

-- Why the group or the side keys cannot be used, or nil: the group must
-- exist (NOGROUP otherwise), and the side keys must have their types.
local function preflight(stream, group, types)
  local p = redis.pcall('XPENDING', stream, group, '-', '+', 0)
  if type(p) == 'table' and p.err then
    return p.err
  end
  return wrong_type(types)
end

-- Raises the preflight error, if any, before a script changes anything.
local function check(stream, group, types)
  local failure = preflight(stream, group, types)
  if failure then
    error({ err = failure })
  end
end

-- The entries of an `XREADGROUP ... CLAIM` reply for one stream, as
-- { { id, fields (false if trimmed), idle ms, delivery count }, ... }.
-- Claimed entries come first and carry their idle time and delivery count;
-- new ones carry 0 and 0. Redis 8.4.0 sends the two numbers as strings,
-- later releases as integers.
local function claim_reply_entries(reply)
  local out = {}
  if not reply or not reply[1] then
    return out
  end
  for _, e in ipairs(reply[1][2]) do
    out[#out + 1] = { e[1], e[2] or false, tonumber(e[3]) or 0, tonumber(e[4]) or 0 }
  end
  return out
end

-- Appends that a settle script needs and cannot make itself.
--
-- A settle script (retry with copy, dead letter, redrive) that appends
-- entries first plans every append. When one of them has more fields than a
-- script can pass (`fits`), it changes nothing and returns
-- { 'big', target key, { { id, fields }, ... } }, listing every append it
-- planned. The broker then sends, in one MULTI/EXEC, an XADD of each (in
-- that order) followed by the same script with those ids as "precopied"
-- (ARGV: K, then K ids). The script finds them as the last K entries of the
-- target, uses them instead of appending, and deletes any it no longer
-- needs (its id was settled by someone else in between). Appends stay in
-- the order planned, and the call is still all or nothing.
--
-- `precopied(target, argv_at)` reads K and the ids at ARGV[argv_at..] and
-- returns (map id -> appended entry id, list of appended entry ids, index
-- of the first ARGV after them), or raises if the appended entries are not
-- where they should be.
local function precopied(target, argv_at)
  local k = tonumber(ARGV[argv_at]) or 0
  local by_id, all = {}, {}
  if k == 0 then
    return by_id, all, argv_at + 1
  end
  local last = redis.call('XREVRANGE', target, '+', '-', 'COUNT', k)
  if #last ~= k then
    error({ err = 'ERR ' .. k .. ' precopied entries expected at the end of ' .. target .. ', found ' .. #last })
  end
  for j = 1, k do
    local entry = last[k + 1 - j]
    local id, f = ARGV[argv_at + j], entry[2]
    -- Each must be the copy or the dead letter planned for its id (never
    -- delete or use an entry the broker did not append).
    if not (f[1] == 'rs:group' or (f[1] == 'rs:id' and f[2] == id)) then
      error({ err = 'ERR the entry appended for ' .. id .. ' is not at the end of ' .. target })
    end
    by_id[id] = entry[1]
    all[j] = entry[1]
  end
  return by_id, all, argv_at + k + 1
end

-- Deletes precopied entries a script did not use.
local function drop_unused(target, all, used)
  local unused = {}
  for _, entry_id in ipairs(all) do
    if not used[entry_id] then
      unused[#unused + 1] = entry_id
    end
  end
  if #unused > 0 then
    call_chunked({ 'XDEL', target }, unused)
  end
end

-- The start of a script that may be given precopied entries: takes them
-- from ARGV `argv_at` on (see `precopied`), then checks the group and the
-- side keys (see `preflight`). On a failure, returned fourth, it deletes
-- the precopied entries, so that the call changes nothing.
local function begin_settle(target, argv_at, stream, group, types)
  local pre, pre_all, first = precopied(target, argv_at)
  local failure = preflight(stream, group, types)
  if failure then
    drop_unused(target, pre_all, {})
  end
  return pre, pre_all, first, failure
end

-- Given `plans`, a list of { id = .., fields = .. or nil } (fields: what to
-- append for it), decides how the appends are made:
-- - nothing precopied and every append fits: returns nil (append in Lua);
-- - nothing precopied and one does not fit: returns the 'big' reply;
-- - precopied: sets plan.appended (the entry id) on each planned append
--   that was precopied, and plan.skip on one that was not (it came to need
--   an append after the broker's first pass; it is left as it is).
local function plan_appends(target, plans, pre)
  if next(pre) == nil then
    local big = false
    for _, plan in ipairs(plans) do
      if plan.fields and not fits(plan.fields) then
        big = true
        break
      end
    end
    if not big then
      return nil
    end
    local items = {}
    for _, plan in ipairs(plans) do
      if plan.fields then
        items[#items + 1] = { plan.id, plan.fields }
      end
    end
    return { 'big', target, items }
  end
  for _, plan in ipairs(plans) do
    if plan.fields then
      if pre[plan.id] then
        plan.appended = pre[plan.id]
      else
        plan.skip = true
      end
    end
  end
  return nil
end

-- The plans of a settle script: one { id, times, held } (see `delivered`)
-- for each distinct id from ARGV `first` on that the group holds or owes,
-- in order, each passed with the entry's fields (false once trimmed) to
-- `fill(plan, fields)` to add what to append for it.
local function delivered_plans(stream, group, owed_key, first, fill)
  local plans = {}
  for _, id in ipairs(distinct_ids(first)) do
    local plan = { id = id }
    plan.times, plan.held = delivered(stream, group, owed_key, id)
    if plan.times then
      local e = redis.call('XRANGE', stream, id, id)[1]
      fill(plan, e and e[2] or false)
      plans[#plans + 1] = plan
    end
  end
  return plans
end

-- Calls `write(plan)` on each plan `plan_appends` did not skip, in order,
-- after marking its precopied entry (if any) used. Returns how many it
-- wrote and the used set for `drop_unused`.
local function write_plans(plans, write)
  local n, used = 0, {}
  for _, plan in ipairs(plans) do
    if not plan.skip then
      if plan.appended then
        used[plan.appended] = true
      end
      write(plan)
      n = n + 1
    end
  end
  return n, used
end
