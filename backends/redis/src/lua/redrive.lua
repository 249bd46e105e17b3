-- Makes dead letters owed again with their delivery counts reset. An entry
-- the stream still holds is owed under its own id; one trimmed away since
-- is appended again from the dead letter's copy of its fields, as a retry
-- copy for the group (read as new, behind later entries).
-- KEYS: 1 stream, 2 due, 3 owed, 4 dead, 5 dead index, 6 wake.
-- ARGV: 1 group, 2.. ids. Reply: how many were redriven.
local S, DUE, OWED, DEAD, DIX, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local G = ARGV[1]
check_group(S, G)
local now = now_ms()
local n = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local member = dead_member(DIX, id)
  if member then
    local dead_id = member_dead_id(member)
    local letter = redis.call('XRANGE', DEAD, dead_id, dead_id)
    redis.call('ZREM', DIX, member)
    redis.call('XDEL', DEAD, dead_id)
    if redis.call('XRANGE', S, id, id)[1] then
      redis.call('ZADD', DUE, now, id)
      redis.call('HSET', OWED, id, '0 ' .. now)
      n = n + 1
    elseif letter[1] then
      local args = { 'rs:group', G, 'rs:count', '0' }
      for _, v in ipairs(user_fields(letter[1][2])) do
        args[#args + 1] = v
      end
      if #args > 4 then
        redis.call('XADD', S, '*', unpack(args))
        n = n + 1
      end
    end
  end
end
if n > 0 then
  wake(WAKE, now)
end
return n
