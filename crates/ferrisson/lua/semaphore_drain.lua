#!lua
-- Takes every available permit at once.
-- No allow-oom: with memory full, Redis refuses this script before it runs (without a
-- shebang it would be refused only at its first denyoom command, if no write came first).
-- KEYS[1]: the semaphore's available-permit counter
-- Returns: {1, permits taken (0 when none are available)}; {0} the semaphore does not exist.
local available = redis.call('GET', KEYS[1])
if not available then
  return {0}
end
available = tonumber(available)
if available <= 0 then
  return {1, 0}
end
redis.call('SET', KEYS[1], 0)
return {1, available}
