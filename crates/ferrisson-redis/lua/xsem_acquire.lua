-- Takes permits of an expirable semaphore, each under its own fresh id, all or none,
-- after returning every permit whose lease ran out.
-- Runs after creates_keys.lua (the shebang, no allow-oom) and server_clock.lua.
-- KEYS[1]: the semaphore's free-permit counter
-- KEYS[2]: the held permits, a sorted set {permit id: expiry in server ms}
-- KEYS[3]: the semaphore's release channel
-- ARGV[1]: lease in milliseconds
-- ARGV[2..n+1]: the new permits' ids (n >= 1)
-- Returns: 1 acquired;
--          {0, ms until the earliest held permit expires (-1: none is held)} too few free;
--          -1 the semaphore does not exist (never initialised, or deleted).
--          A grant is a single value: a table made and written as an array costs Redis
--          0.45-0.7 µs in a coalesced batch.
local free = redis.call('GET', KEYS[1])
if not free then
  return -1
end
local now = batch_clock or read_clock()
local reclaimed = redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
free = tonumber(free) + reclaimed
if reclaimed > 0 then
  redis.call('INCRBY', KEYS[1], reclaimed)
end
local wanted = #ARGV - 1
-- The ids are this attempt's own: finding them held means an earlier call of this
-- attempt took them (its reply was lost), so the call is safe to send again. On the
-- granting path ZADD NX tells, without a lookup of its own: it adds none of them then.
if free >= wanted then
  local expiry = now + tonumber(ARGV[1])
  local entries = {}
  for i = 2, #ARGV do
    entries[#entries + 1] = expiry
    entries[#entries + 1] = ARGV[i]
  end
  local added = redis.call('ZADD', KEYS[2], 'NX', unpack(entries))
  if added > 0 then
    redis.call('DECRBY', KEYS[1], added)
  end
  -- Reclaimed permits this acquire did not take: other clients' waiters may take them.
  local left = math.min(reclaimed, free - added)
  if left > 0 then
    redis.call('SPUBLISH', KEYS[3], left)
  end
  return 1
end
if redis.call('ZSCORE', KEYS[2], ARGV[2]) then
  return 1
end
local earliest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if earliest[2] then
  return {0, tonumber(earliest[2]) - now}
end
return {0, -1}
