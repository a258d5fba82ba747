#!lua
-- Sets a semaphore's available permits to a count, whatever they were (creating it when
-- missing), and wakes as many waiters as permits became available. Also used by the
-- expirable semaphore, whose expired permits are returned first, so that the count set
-- is what is available.
-- No allow-oom: with memory full, Redis refuses this script before it runs (without a
-- shebang it would be refused only at its first denyoom command, if no write came first).
-- KEYS[1]: the semaphore's available-permit counter
-- KEYS[2]: the semaphore's release channel
-- KEYS[3]: (expirable semaphore only) the held permits, {permit id: expiry in server ms}
-- ARGV[1]: the count (>= 0)
-- Returns: the available count before (expired permits included), or nil when the
--          semaphore did not exist.
local before = redis.call('GET', KEYS[1])
if before and KEYS[3] then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  before = tonumber(before) + redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
end
redis.call('SET', KEYS[1], ARGV[1])
local grown = tonumber(ARGV[1]) - tonumber(before or 0)
if grown > 0 then
  redis.call('SPUBLISH', KEYS[2], grown)
end
if before then
  return tonumber(before)
end
return nil
