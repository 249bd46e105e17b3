-- Helpers shared by every ruststream script. Each script is this file
-- followed by its own body (see scripts.rs), so these are plain locals.
--
-- Times are the server's clock (TIME), in milliseconds: every worker of a
-- group then agrees on when a delayed entry falls due.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- An id `ms-seq` as fixed-width text, so that ids sort as text the way
-- they sort as numbers (dead-letter index members, merges).
local function pad(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then
    ms, seq = id, '0'
  end
  return string.rep('0', 20 - #ms) .. ms .. '-' .. string.rep('0', 20 - #seq) .. seq
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

-- Records a dead letter: one entry of the group's dead-letter stream
-- holding the original id, the reason, the delivery count, the time and the
-- entry's own fields (so it can be redriven after the stream is trimmed),
-- plus an index member `<padded id>:<dead-letter stream id>` for lookups
-- and listing in id order.
local function bury(dead_key, index_key, id, fields, reason, times, now)
  local args = {
    'rs:id', id,
    'rs:reason', reason,
    'rs:times_delivered', tostring(times),
    'rs:dead_at', tostring(now),
  }
  if fields then
    for i = 1, #fields do
      args[#args + 1] = fields[i]
    end
  else
    args[#args + 1] = 'rs:lost'
    args[#args + 1] = '1'
  end
  local dead_id = redis.call('XADD', dead_key, '*', unpack(args))
  redis.call('ZADD', index_key, 0, pad(id) .. ':' .. dead_id)
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
  local ms = string.gsub(string.sub(member, 1, 20), '^0+', '')
  local seq = string.gsub(string.sub(member, 22, 41), '^0+', '')
  if ms == '' then ms = '0' end
  if seq == '' then seq = '0' end
  return ms .. '-' .. seq
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

local function max_reason(times, max)
  return 'delivered ' .. times .. ' times, reaching max_deliveries(' .. max .. ')'
end

-- Raises NOGROUP unless the group exists, before a script changes anything
-- (a script that fails half-way is not rolled back).
local function check_group(stream, group)
  redis.call('XPENDING', stream, group, '-', '+', 0)
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
