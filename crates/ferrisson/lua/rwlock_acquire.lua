-- Acquires or re-enters the read or the write side of a read-write lock.
-- KEYS[1]: the lock hash {mode: 'read'|'write', writer: owner, fence: token,
--          r:<owner>: read holds, w:<owner>: write holds, d:<owner>: the owner's lease
--          deadline in server ms, x:<release id>: applied-release marker (value: when to forget it)}
-- KEYS[2]: the write side's fencing counter (a string that never expires)
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: 'read' or 'write'
-- ARGV[4]: 'acquire', or 'reenter' when the caller believes this owner holds the lock
--          already: then never start a first hold under this owner id (the old one was lost)
-- Returns: {1, fencing token (0 for a read), this owner's holds of that side} when granted;
--          {0, ms until the earliest conflicting holder's lease runs out (-1: none)} when blocked;
--          {2} in 'reenter' mode when this owner holds nothing any more;
--          {3} when a reader that is not the writer asks for the write side (an upgrade
--          would deadlock against any other reader doing the same).
local key = KEYS[1]
local owner = ARGV[1]
local lease = tonumber(ARGV[2])
-- Server time, so that client clock skew cannot expire a live holder or keep a dead one.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- Holders share one hash, so the hash's TTL cannot expire one dead reader while others
-- renew: evict every owner whose own deadline passed, and stale release markers.
local fields = redis.call('HGETALL', key)
local live = 0
for i = 1, #fields, 2 do
  local field, value = fields[i], tonumber(fields[i + 1])
  local prefix = string.sub(field, 1, 2)
  if prefix == 'd:' then
    if value <= now then
      local dead = string.sub(field, 3)
      redis.call('HDEL', key, field, 'r:' .. dead, 'w:' .. dead)
      if redis.call('HGET', key, 'writer') == dead then
        redis.call('HDEL', key, 'writer')
      end
    else
      live = live + 1
    end
  elseif prefix == 'x:' and value <= now then
    redis.call('HDEL', key, field)
  end
end
if live == 0 then
  redis.call('DEL', key)
end
local mode = redis.call('HGET', key, 'mode')
local writer = redis.call('HGET', key, 'writer')
if mode == 'write' and not writer then
  -- The writer died; what is left are readers.
  redis.call('HSET', key, 'mode', 'read')
  mode = 'read'
end

local reads = tonumber(redis.call('HGET', key, 'r:' .. owner) or '0')
local writes = tonumber(redis.call('HGET', key, 'w:' .. owner) or '0')
if ARGV[4] == 'reenter' and reads + writes == 0 then
  return {2}
end

local function grant(side)
  local count = redis.call('HINCRBY', key, side .. ':' .. owner, 1)
  local deadline = now + lease
  if deadline > tonumber(redis.call('HGET', key, 'd:' .. owner) or '0') then
    redis.call('HSET', key, 'd:' .. owner, deadline)
  end
  -- The hash outlives every holder's deadline; evictions above take single holders out.
  if redis.call('PTTL', key) < lease then
    redis.call('PEXPIRE', key, lease)
  end
  return count
end

if ARGV[3] == 'read' then
  if not mode then
    redis.call('HSET', key, 'mode', 'read')
    return {1, 0, grant('r')}
  end
  if mode == 'read' or writer == owner then
    return {1, 0, grant('r')}
  end
else
  if mode == 'write' and writer == owner then
    return {1, tonumber(redis.call('HGET', key, 'fence') or '0'), grant('w')}
  end
  if reads > 0 then
    return {3}
  end
  if not mode then
    local token = redis.call('INCR', KEYS[2])
    redis.call('HSET', key, 'mode', 'write', 'writer', owner, 'fence', token)
    return {1, token, grant('w')}
  end
end

-- Blocked: the state can change without a release message only when a conflicting
-- holder's lease runs out, so that bounds the caller's wait.
local wait = -1
fields = redis.call('HGETALL', key)
for i = 1, #fields, 2 do
  local field = fields[i]
  if string.sub(field, 1, 2) == 'd:' and string.sub(field, 3) ~= owner then
    local left = tonumber(fields[i + 1]) - now
    if wait < 0 or left < wait then
      wait = left
    end
  end
end
return {0, wait}
