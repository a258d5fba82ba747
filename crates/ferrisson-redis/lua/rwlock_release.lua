#!lua flags=allow-oom
-- Releases one read or write hold of a read-write lock and wakes whoever can now proceed.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the lock hash (layout in rwlock_acquire.lua)
-- KEYS[2]: the channel read waiters listen on
-- KEYS[3]: the channel write waiters listen on
-- ARGV[1]: owner id
-- ARGV[2]: 'read' or 'write'
-- ARGV[3]: release id, remembered while the lock lives so a retried release is not applied twice
-- ARGV[4]: how long to remember a release id, in milliseconds
-- Returns: 1 the lock is free now (only waiting writers' intents remain; waiters woken); 2 one hold released, the lock
--          is still held (by this owner or others); 3 this release id was already applied;
--          0 no such lock (lease expired); -1 this owner holds no such side.
local key = KEYS[1]
local owner = ARGV[1]
if redis.call('EXISTS', key) == 0 then
  return 0
end
local marker = 'x:' .. ARGV[3]
if redis.call('HEXISTS', key, marker) == 1 then
  return 3
end
local side = 'r:'
if ARGV[2] == 'write' then
  side = 'w:'
end
if redis.call('HEXISTS', key, side .. owner) == 0 then
  return -1
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local function remember()
  redis.call('HSET', key, marker, now + tonumber(ARGV[4]))
end

if redis.call('HINCRBY', key, side .. owner, -1) > 0 then
  remember()
  return 2
end
redis.call('HDEL', key, side .. owner)
if ARGV[2] == 'write' then
  redis.call('HDEL', key, 'writer')
  if redis.call('HEXISTS', key, 'r:' .. owner) == 1 then
    -- Downgrade: the writer keeps its read holds, and every waiting reader may join.
    redis.call('HSET', key, 'mode', 'read')
    remember()
    redis.call('SPUBLISH', KEYS[2], 'all')
    return 2
  end
elseif redis.call('HEXISTS', key, 'w:' .. owner) == 1 then
  -- A writer dropped a read hold it took inside its write hold.
  remember()
  return 2
end

redis.call('HDEL', key, 'd:' .. owner)
for _, field in ipairs(redis.call('HKEYS', key)) do
  if string.sub(field, 1, 2) == 'd:' then
    -- Other readers remain.
    remember()
    return 2
  end
end
-- Free: keep only waiting writers' intents, so that readers do not overtake them now.
local rest = {}
for _, field in ipairs(redis.call('HKEYS', key)) do
  if string.sub(field, 1, 2) ~= 'i:' then
    rest[#rest + 1] = field
  end
end
if #rest > 0 then
  redis.call('HDEL', key, unpack(rest))
end
if ARGV[2] == 'write' then
  redis.call('SPUBLISH', KEYS[2], 'all')
end
redis.call('SPUBLISH', KEYS[3], 'released')
return 1
