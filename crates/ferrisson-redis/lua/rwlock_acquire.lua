-- Acquires or re-enters the read or the write side of a read-write lock.
-- Runs after fencing_token.lua, which carries the shebang (no allow-oom).
-- KEYS[1]: the lock hash {mode: 'read'|'write', writer: owner, fence: token,
--          r:<owner>: read holds, w:<owner>: write holds, d:<owner>: the owner's lease
--          deadline in server ms, i:<owner>: a waiting writer's intent (its deadline in
--          server ms), x:<release id>: applied-release marker (value: when to forget it)}
-- KEYS[2]: the fencing floor of the lock's hash slot (see fencing_token.lua)
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: 'read' or 'write'
-- ARGV[4]: 'acquire'; 'try' (a blocked writer leaves no intent); or 'reenter' when the
--          caller believes this owner holds the lock already: then never start a first
--          hold under this owner id (the old one was lost)
-- ARGV[5]: how long a blocked writer's intent lives unless renewed, in milliseconds
-- Returns: {1, fencing token (0 for a read), this owner's holds of that side} when granted;
--          {0, ms until the earliest conflicting holder's lease or writer's intent runs
--           out (-1: none)} when blocked;
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
-- renew: evict every owner whose own deadline passed, dead writers' intents and stale
-- release markers.
local fields = redis.call('HGETALL', key)
local live, intents = 0, 0
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
  elseif prefix == 'i:' then
    if value <= now then
      redis.call('HDEL', key, field)
    else
      intents = intents + 1
    end
  elseif prefix == 'x:' and value <= now then
    redis.call('HDEL', key, field)
  end
end
if live == 0 then
  if intents == 0 then
    redis.call('DEL', key)
  else
    redis.call('HDEL', key, 'mode', 'writer')
  end
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
-- In 'acquire' and 'try' the owner id is this attempt's own: finding it holding the side
-- asked for means an earlier call of this attempt was granted (its reply was lost). The
-- hold is reported, not doubled, so the call is safe to send again.
if ARGV[4] ~= 'reenter' then
  if ARGV[3] == 'read' and reads > 0 then
    return {1, 0, reads}
  end
  if ARGV[3] == 'write' and writes > 0 then
    return {1, tonumber(redis.call('HGET', key, 'fence') or '0'), writes}
  end
end

-- The hash outlives every holder's deadline and every intent.
local function keep(ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

local function grant(side)
  local count = redis.call('HINCRBY', key, side .. ':' .. owner, 1)
  local deadline = now + lease
  if deadline > tonumber(redis.call('HGET', key, 'd:' .. owner) or '0') then
    redis.call('HSET', key, 'd:' .. owner, deadline)
  end
  keep(lease)
  return count
end

-- Another owner's writer waits: a new reader queues behind it, so that a stream of
-- overlapping readers cannot starve writers.
local function writer_waiting()
  for _, field in ipairs(redis.call('HKEYS', key)) do
    if string.sub(field, 1, 2) == 'i:' and string.sub(field, 3) ~= owner then
      return true
    end
  end
  return false
end

if ARGV[3] == 'read' then
  -- The writer may read; a reader re-enters: neither waits (it would wait for itself).
  if writer == owner or (mode == 'read' and reads > 0) then
    return {1, 0, grant('r')}
  end
  if mode ~= 'write' and not writer_waiting() then
    if not mode then
      redis.call('HSET', key, 'mode', 'read')
    end
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
    redis.call('HDEL', key, 'i:' .. owner)
    local token = fencing_token(KEYS[2])
    redis.call('HSET', key, 'mode', 'write', 'writer', owner, 'fence', token)
    return {1, token, grant('w')}
  end
  if ARGV[4] ~= 'try' then
    local intent = tonumber(ARGV[5])
    redis.call('HSET', key, 'i:' .. owner, now + intent)
    keep(intent)
  end
end

-- Blocked: the state can change without a message only when a conflicting holder's
-- lease or a writer's intent runs out, so that bounds the caller's wait.
local wait = -1
fields = redis.call('HGETALL', key)
for i = 1, #fields, 2 do
  local prefix = string.sub(fields[i], 1, 2)
  if (prefix == 'd:' or prefix == 'i:') and string.sub(fields[i], 3) ~= owner then
    local left = tonumber(fields[i + 1]) - now
    if wait < 0 or left < wait then
      wait = left
    end
  end
end
return {0, wait}
