-- A read from a consumer group, atomically: owed entries first, then the
-- mode's own entries, with retry copies, attempt bounds and trimmed entries
-- handled on the server so that the caller only sees deliveries.
--
-- KEYS: 1 stream, 2 due (zset), 3 owed (hash), 4 dead (stream),
--       5 dead index (zset), 6 wake (stream)
-- ARGV: 1 group, 2 consumer, 3 mode (new | claiming | reclaim | own |
--       owed: the owed entries only, the caller then reads new entries
--       itself with a plain XREADGROUP, pipelined right behind),
--       4 count, 5 min idle ms, 6 max deliveries (0: unbounded),
--       7 position (own: read after this id; reclaim: XAUTOCLAIM cursor),
--       8 read mark token ('': none), 9 its lifetime in ms,
--       10 how many held ids follow (n), 11..10+n the ids the reader
--       holds (claiming, reclaim and own with an idle bound: their
--       claims are refreshed before anything idle is taken),
--       11+n.. (claiming) the XREADGROUP ... CLAIM command to run
-- KEYS[7], with a mark: the read mark's key (broker/read_mark.rs)
--
-- Reply { 'resent' }: the mark held this call's own token, so an earlier
-- attempt of it ran (the cluster client sent it again after losing the
-- reply); nothing changed. A re-sent look at the own pending list is read
-- again instead, with no idle bound (see below).
--
-- Reply: { deliveries, dead-lettered ids, dropped ids, meta, set aside,
-- passed-over ids } where a delivery is { id, fields, delivery count,
-- idle ms }, meta is { now, next due (-1: none), stream's last id, wake's
-- last id, cursor }, and an entry set aside is { id, delivery count,
-- reason, error }. The last ids are only filled in when nothing was
-- delivered (the caller then blocks on them). Passed over: retry copies of
-- other groups the read met and acked for this one (a re-read of the own
-- pending list that met only those pages on past them).
--
-- Set aside: an entry at its attempt bound whose dead letter has more fields
-- than a script can pass (error '') is left where it is for the broker to
-- dead-letter (see dead_letter.lua); an owed entry that could not be handed
-- out or dead-lettered for any other reason (error: the server's) is left
-- owed, due again ASIDE_MS later. Either way it never blocks the entries
-- behind it, and a failure here never follows a write it would undo: the
-- script does not fail half-way.

local S, DUE, OWED, DEAD, DIX, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local G, C, MODE = ARGV[1], ARGV[2], ARGV[3]
local COUNT = tonumber(ARGV[4])
local MIN_IDLE = ARGV[5]
local MAX = tonumber(ARGV[6])
local POS = ARGV[7]
-- How long an owed entry that could not be moved waits before it is
-- tried again.
local ASIDE_MS = 10000

local out, dead, dropped, foreign, aside = {}, {}, {}, {}, {}

-- NOGROUP (and side keys of the wrong type) before anything changes: a
-- script is not rolled back on error. The owed-only read checks only the
-- keys: it changes nothing before its XCLAIM, and the XREADGROUP pipelined
-- behind it says NOGROUP.
local TYPES = { [DUE] = 'zset', [OWED] = 'hash', [DEAD] = 'stream', [DIX] = 'zset', [WAKE] = 'stream' }
if MODE ~= 'owed' then
  check(S, G, TYPES)
else
  local failure = wrong_type(TYPES)
  if failure then
    error({ err = failure })
  end
end

-- The read mark, before anything changes. A user the server refuses SET
-- reads on unmarked (the broker logs that on its plain reads).
local TOKEN = ARGV[8]
if TOKEN ~= '' then
  local seen = redis.pcall('SET', KEYS[7], TOKEN, 'GET', 'PX', ARGV[9])
  if seen == TOKEN and MODE ~= 'own' then
    return { 'resent' }
  elseif seen == TOKEN then
    -- The first attempt claimed the idle entries of the own pending list,
    -- which made them fresh: this one reads every own entry after POS,
    -- idle or not, so that none is left handed to no one (an entry a live
    -- twin with this name runs may come too: a duplicate, not a loss).
    MIN_IDLE = '0'
  end
end

local now = now_ms()

-- The reader's entries in hand are not idle, however late its own claim
-- refreshes are: refreshed here, before any step below looks for idle
-- entries, so no step takes one back and counts a delivery for it.
local HELD_N = tonumber(ARGV[10])
local CLAIM_AT = 11 + HELD_N
if HELD_N > 0 then
  refresh_claims(S, G, C, distinct_ids(11, 10 + HELD_N))
end

local function over(times)
  return MAX > 0 and times >= MAX
end

-- Dead-letters an entry that reached the bound: returns true once its dead
-- letter is written (the caller then takes it out of the pending list or
-- the owed set). Otherwise the entry is set aside and stays as it is.
local function give_up(id, fields, times)
  local reason = max_reason(times, MAX)
  local letter = dead_fields(id, fields, reason, times, now)
  if not fits(letter) then
    aside[#aside + 1] = { id, times, reason, '' }
    return false
  end
  local err = bury(DEAD, DIX, id, letter)
  if err then
    aside[#aside + 1] = { id, times, reason, err }
    return false
  end
  dead[#dead + 1] = id
  return true
end

-- An entry that was pending (claimed, re-read): hand it out, or drop it if
-- it was trimmed away, or dead-letter it if it reached the bound.
local function redeliver(id, fields, times, idle)
  if not fields then
    redis.call('XACK', S, G, id)
    dropped[#dropped + 1] = id
  elseif copy_group(fields) and copy_group(fields) ~= G then
    foreign[#foreign + 1] = id
  elseif over(times) then
    if give_up(id, fields, times) then
      redis.call('XACK', S, G, id)
    end
  else
    out[#out + 1] = { id, fields, times, idle }
  end
end

-- Hands out re-read pending entries with the delivery counts and idle
-- times in `held`, an XPENDING reply taken before the read (which bumps
-- the counts and resets the idle times). An entry XAUTOCLAIM found deleted
-- is false: skipped.
local function redeliver_all(entries, held)
  local meta = {}
  for _, p in ipairs(held) do
    meta[p[1]] = p
  end
  for _, e in ipairs(entries) do
    if e then
      local m = meta[e[1]]
      redeliver(e[1], e[2], m and m[4] or 1, m and m[3] or 0)
    end
  end
end

-- Owed entries this read handed out, with their delivery counts: an entry
-- past the group's cursor (moved back since it became owed) is read again
-- by the XREADGROUP below, which must not hand it out twice.
local owed_out = {}

-- An entry read past the group's cursor.
local function deliver_new(id, fields)
  if owed_out[id] then
    -- Already handed out by the owed step; XREADGROUP reset its pending
    -- record's count to 1, so put back the count the owed step set.
    redis.call('XCLAIM', S, G, C, 0, id, 'RETRYCOUNT', owed_out[id] + 1, 'JUSTID')
    return
  end
  local group = copy_group(fields)
  if group == nil then
    out[#out + 1] = { id, fields, 0, 0 }
    return
  end
  if group ~= G then
    foreign[#foreign + 1] = id
    return
  end
  local times = carried(fields)
  if over(times) then
    if give_up(id, fields, times) then
      redis.call('XACK', S, G, id)
    end
    return
  end
  if times > 0 then
    -- The group's own retry copy: its pending record counts the deliveries
    -- of the original too, so claims and XPENDING see the whole history.
    redis.call('XCLAIM', S, G, C, 0, id, 'RETRYCOUNT', times + 1, 'JUSTID')
  end
  out[#out + 1] = { id, fields, times, 0 }
end

-- Entries past the cursor until `COUNT` deliveries or the end of the stream
-- (copies for other groups take no room).
local function read_new()
  for _ = 1, 16 do
    local room = COUNT - #out
    if room <= 0 then
      return
    end
    local reply = redis.call('XREADGROUP', 'GROUP', G, C, 'COUNT', room, 'STREAMS', S, '>')
    if not reply then
      return
    end
    local entries = reply[1][2]
    for _, e in ipairs(entries) do
      deliver_new(e[1], e[2])
    end
    if #entries < room then
      return
    end
  end
end

-- 1. Owed entries: delayed retries now due, nacks, redrives. They left the
--    pending list when they became owed (so no claim could take them
--    early); XCLAIM ... FORCE puts each back under the reader, same id.
--    One a consumer holds all the same was read again as new after the
--    group's cursor was moved back: it is out already, so it owes nothing
--    any more (never taken from its holder). Members of one due time come
--    in id order (they are padded ids). An entry dead-lettered, set aside
--    or found held takes no room, so the loop fetches again until the room
--    is filled.
local function set_aside(member, id, times, err)
  redis.call('ZADD', DUE, now + ASIDE_MS, member)
  aside[#aside + 1] = { id, times, '', err }
end

if MODE ~= 'own' then
  for _ = 1, 8 do
    local room = COUNT - #out
    if room <= 0 then
      break
    end
    local due = redis.call('ZRANGEBYSCORE', DUE, '-inf', now, 'LIMIT', 0, room)
    if #due == 0 then
      break
    end
    for _, member in ipairs(due) do
      local id = due_id(member)
      local times, since = owed_record(OWED, id)
      if not times then
        -- A member without its record owes nothing (its entry was acked
        -- by a broker that only cleared the record).
        redis.call('ZREM', DUE, member)
      elseif redis.call('XPENDING', S, G, id, id, 1)[1] then
        redis.call('ZREM', DUE, member)
        redis.call('HDEL', OWED, id)
      elseif over(times) then
        local e = redis.call('XRANGE', S, id, id)
        if give_up(id, e[1] and e[1][2] or false, times) then
          redis.call('ZREM', DUE, member)
          redis.call('HDEL', OWED, id)
        else
          redis.call('ZADD', DUE, now + ASIDE_MS, member)
        end
      else
        local got = redis.pcall('XCLAIM', S, G, C, 0, id, 'FORCE', 'RETRYCOUNT', times + 1)
        if got.err then
          set_aside(member, id, times, got.err)
        else
          local group = got[1] and got[1][2] and copy_group(got[1][2])
          if group and group ~= G then
            -- Another group's retry copy, owed here by mistake (a lost
            -- read's strays handed back): passed over, as a read does.
            foreign[#foreign + 1] = id
          elseif got[1] and got[1][2] then
            out[#out + 1] = { id, got[1][2], times, now - since }
            owed_out[id] = times
          else
            dropped[#dropped + 1] = id
          end
          redis.call('ZREM', DUE, member)
          redis.call('HDEL', OWED, id)
        end
      end
    end
  end
end

local cursor = POS

-- 2. The mode's own entries.
if MODE == 'new' then
  read_new()
elseif MODE == 'reclaim' then
  -- XAUTOCLAIM from the consumer's cursor; XPENDING over the same window
  -- first (XAUTOCLAIM looks at most 10 x COUNT entries) for the idle times
  -- and delivery counts the claim is about to reset and bump.
  local wrapped = (cursor == '0-0')
  for _ = 1, 3 do
    local room = COUNT - #out
    if room <= 0 then
      break
    end
    local held = redis.call('XPENDING', S, G, cursor, '+', room * 10)
    local r = redis.call('XAUTOCLAIM', S, G, C, MIN_IDLE, cursor, 'COUNT', room)
    redeliver_all(r[2], held)
    -- Entries trimmed from the stream while pending: Redis 7 drops them
    -- from the pending list as it reports them; ack them for older ones.
    for _, id in ipairs(r[3] or {}) do
      redis.call('XACK', S, G, id)
      dropped[#dropped + 1] = id
    end
    cursor = r[1]
    if cursor == '0-0' then
      if wrapped then
        break
      end
      wrapped = true
    end
  end
elseif MODE == 'claiming' then
  -- ARGV CLAIM_AT.. is the XREADGROUP ... CLAIM command, built by the
  -- caller; its COUNT becomes the room left after the owed entries.
  local room = COUNT - #out
  if room > 0 then
    local cmd = {}
    for i = CLAIM_AT, #ARGV do
      cmd[#cmd + 1] = ARGV[i]
    end
    for i = 5, #cmd - 1 do
      if cmd[i] == 'COUNT' then
        cmd[i + 1] = tostring(room)
        break
      end
    end
    for _, e in ipairs(claim_reply_entries(redis.call(unpack(cmd)))) do
      local id, fields, idle, previously = e[1], e[2], e[3], e[4]
      if previously > 0 then
        -- Claimed: its pending record already counts this delivery.
        local p = redis.call('XPENDING', S, G, id, id, 1)
        local times = p[1] and (p[1][4] - 1) or previously
        redeliver(id, fields, times, idle)
      elseif fields then
        deliver_new(id, fields)
      end
    end
    if #out < COUNT then
      read_new()
    end
  end
elseif MODE == 'own' and tonumber(MIN_IDLE) > 0 then
  -- Only the entries idle long enough: XPENDING picks them, XCLAIM hands
  -- them out (counting a delivery, as a re-read does). An entry trimmed
  -- from the stream is not returned (Redis 7 drops it from the pending
  -- list; ack it for older servers).
  local held = redis.call('XPENDING', S, G, 'IDLE', MIN_IDLE, '(' .. POS, '+', COUNT, C)
  if #held > 0 then
    local entries = {}
    for first = 1, #held, CHUNK do
      local claim = { 'XCLAIM', S, G, C, MIN_IDLE }
      for i = first, math.min(first + CHUNK - 1, #held) do
        claim[#claim + 1] = held[i][1]
      end
      for _, e in ipairs(redis.call(unpack(claim))) do
        entries[#entries + 1] = e
      end
    end
    local returned = {}
    for _, e in ipairs(entries) do
      if e then
        returned[e[1]] = true
      end
    end
    redeliver_all(entries, held)
    for _, p in ipairs(held) do
      if not returned[p[1]] then
        redis.call('XACK', S, G, p[1])
        dropped[#dropped + 1] = p[1]
      end
    end
  end
elseif MODE == 'own' then
  local held = redis.call('XPENDING', S, G, '(' .. POS, '+', COUNT, C)
  local reply = redis.call('XREADGROUP', 'GROUP', G, C, 'COUNT', COUNT, 'STREAMS', S, POS)
  if reply then
    redeliver_all(reply[1][2], held)
  end
end

if #foreign > 0 then
  call_chunked({ 'XACK', S, G }, foreign)
end

-- 3. What a blocking caller waits on when nothing was delivered: the wake
--    stream's last id, and (but for the owed-only read, whose caller asks
--    for the group's cursor instead) the stream's.
local next_due, stream_last, wake_last = -1, '', ''
if #out == 0 then
  local first = redis.call('ZRANGE', DUE, 0, 0, 'WITHSCORES')
  if first[2] then
    next_due = tonumber(first[2])
  end
  if MODE ~= 'owed' then
    local last = redis.call('XREVRANGE', S, '+', '-', 'COUNT', 1)
    stream_last = last[1] and last[1][1] or '0-0'
  end
  local w = redis.call('XREVRANGE', WAKE, '+', '-', 'COUNT', 1)
  wake_last = w[1] and w[1][1] or '0-0'
end

return { out, dead, dropped, { now, next_due, stream_last, wake_last, cursor }, aside, foreign }
