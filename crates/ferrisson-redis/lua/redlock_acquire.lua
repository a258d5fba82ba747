-- Acquires a Redlock's key on one of its servers: SET NX PX with the holder's owner id,
-- and this server's fencing token for the attempt.
-- Runs after fencing_token.lua, which carries the shebang (no allow-oom).
-- KEYS[1]: the lock key on this server (a string holding the owner id)
-- KEYS[2]: the fencing floor of the lock's hash slot on this server (see
--          fencing_token.lua)
-- ARGV[1]: owner id, made for this one attempt
-- ARGV[2]: time to live in milliseconds
-- Returns: this server's fencing token (a text) acquired, also when the key holds this
--          owner id already: an earlier call of this attempt was granted and its reply
--          lost (its token was never seen; a new one is as good), so the call is safe to
--          send again; the holder's remaining ttl in ms (an integer; -1: no expiry) held.
--          The replies of simple_acquire.lua, read by the same code.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
    or redis.call('GET', KEYS[1]) == ARGV[1] then
  return fencing_token(KEYS[2])
end
return redis.call('PTTL', KEYS[1])
