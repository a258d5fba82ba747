-- Acquires a non-reentrant lock: SET NX PX with the holder's owner id, and a fencing
-- token; a refused waiter's client registers to be woken (see wake.lua).
-- Runs after fencing_token.lua, which carries the shebang (no allow-oom), and wake.lua.
-- KEYS[1]: the lock key (a string holding the owner id)
-- KEYS[2]: the fencing floor of the lock's hash slot (see fencing_token.lua)
-- KEYS[3]: the waiting clients, a sorted set {<client id>: server time in µs} (wake.lua)
-- ARGV[1]: owner id, made for this one attempt
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: the caller's client id when the caller waits subscribed to its wake-up
--          channel, '' otherwise: a refusal registers the client in KEYS[3]
-- ARGV[4]: '1' when other waiters of the caller's client still wait after a grant: the
--          client stays registered (the release that woke it took its registration);
--          otherwise a grant takes the caller's client off KEYS[3]
-- Returns: the fencing token (a text) acquired, also when the key holds this owner id already:
--          an earlier call of this attempt was granted and its reply lost. That call's
--          token was never seen, and a new one is above every earlier holder's just as
--          well, so the call is safe to send again (the client's registration ends as
--          after one call);
--          the holder's remaining ttl in ms (an integer; -1: no expiry) held (sent again,
--          the client is registered once, at the time of the last call).
-- Single values, not tables: a table made and written as an array cost Redis 0.45-0.7 µs
-- in a coalesced batch, where a whole pair costs about 6.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
    or redis.call('GET', KEYS[1]) == ARGV[1] then
  if ARGV[3] ~= '' then
    granted_to_client(KEYS[3], ARGV[3], ARGV[4], ARGV[2])
  end
  return fencing_token(KEYS[2])
end
local pttl = redis.call('PTTL', KEYS[1])
if ARGV[3] ~= '' then
  register_client(KEYS[3], ARGV[3], pttl)
end
return pttl
