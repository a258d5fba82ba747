#!lua
-- Takes every available permit at once. Also used by the expirable semaphore, whose
-- expired permits are returned first and taken with the rest.
-- No allow-oom: with memory full, Redis refuses this script before it runs (without a
-- shebang it would be refused only at its first denyoom command, if no write came first).
-- KEYS[1]: the semaphore's available-permit counter
-- KEYS[2]: (expirable semaphore only) the held permits, {permit id: expiry in server ms}
-- Returns: {1, permits taken (0 when none are available)}; {0} the semaphore does not exist.
local available = redis.call('GET', KEYS[1])
if not available then
  return {0}
end
available = tonumber(available)
if KEYS[2] then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  available = available + redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
end
if available <= 0 then
  -- Negative (more removed than were free) stays as it is: nothing to take.
  if KEYS[2] then
    redis.call('SET', KEYS[1], available)
  end
  return {1, 0}
end
redis.call('SET', KEYS[1], 0)
return {1, available}
