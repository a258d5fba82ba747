#!lua
-- Acquires a non-reentrant lock: SET NX PX with the holder's random token.
-- No allow-oom: with memory full, Redis refuses this script before it runs (without a
-- shebang it would be refused only at its first denyoom command, if no write came first).
-- KEYS[1]: the lock key (a string holding the token)
-- ARGV[1]: token
-- ARGV[2]: lease in milliseconds
-- Returns: {1} acquired; {0, holder's remaining ttl in ms (-1: no expiry)} held.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1}
end
return {0, redis.call('PTTL', KEYS[1])}
