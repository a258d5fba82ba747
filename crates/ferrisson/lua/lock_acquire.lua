#!lua
-- Acquires or re-enters a reentrant lock.
-- No allow-oom: with memory full, Redis refuses this script before it runs (without a
-- shebang it would be refused only at its first denyoom command, if no write came first).
-- KEYS[1]: the lock hash {<owner>: hold count, fence: fencing token}
-- KEYS[2]: the lock's fencing counter (a string that never expires)
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: 'reenter' when the caller believes it holds the lock already: then never
--          start a new hold under this owner id (the old one was lost), else 'acquire'
-- Returns: {1, fencing token, hold count} when acquired or re-entered;
--          {0, holder's remaining ttl in ms (-1: no expiry)} when another owner holds it;
--          {2} in 'reenter' mode when this owner no longer holds it.
-- The free-lock path comes first and costs four calls: it is the one that must be fast.
if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[3] == 'reenter' then
    return {2}
  end
  local token = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], ARGV[1], 1, 'fence', token)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token, 1}
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  local count = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[1], 'fence') or '0'), count}
end
if ARGV[3] == 'reenter' then
  return {2}
end
return {0, redis.call('PTTL', KEYS[1])}
