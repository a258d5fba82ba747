-- Acquires or re-enters a reentrant lock.
-- Runs after fencing_token.lua, which carries the shebang (no allow-oom), and wake.lua.
-- KEYS[1]: the lock hash {<owner>: hold count, fence: fencing token}
-- KEYS[2]: the fencing floor of the lock's hash slot (see fencing_token.lua)
-- KEYS[3]: the waiting clients, a sorted set {<client id>: server time in µs} (wake.lua)
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: 'fresh' for an owner id made for this one attempt: finding it holding the
--          lock means this call ran before (its reply was lost), so report the hold
--          without adding one; 'acquire' for an owner id the caller chose (holding
--          already is a re-entry); 'reenter' when the caller believes it holds the lock
--          already: then never start a new hold under this owner id (the old one was lost)
-- ARGV[4]: the caller's client id when the caller waits subscribed to its wake-up
--          channel, '' otherwise: a refusal registers the client in KEYS[3]
-- ARGV[5]: '1' when other waiters of the caller's client still wait after a grant: the
--          client stays registered (the release that woke it took its registration);
--          otherwise a grant takes the caller's client off KEYS[3]
-- Returns: the fencing token (a text) when a new hold starts (its count is 1);
--          {1, fencing token, hold count} when this owner holds it already;
--          the holder's remaining ttl in ms (an integer; -1: no expiry) when another owner
--          holds it; {2} in 'reenter' mode when this owner no longer holds it.
--          The two usual replies are single values: a table made and written as an array
--          cost Redis 0.45-0.7 µs in a coalesced batch, where a whole pair costs 6-8.
-- The free-lock path comes first and costs five calls (four in a batch, which reads the
-- clock once): it is the one that must be fast.

if redis.call('EXISTS', KEYS[1]) == 0 then
  if ARGV[3] == 'reenter' then
    return {2}
  end
  local token = fencing_token(KEYS[2])
  redis.call('HSET', KEYS[1], ARGV[1], 1, 'fence', token)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if ARGV[4] ~= '' then
    granted_to_client(KEYS[3], ARGV[4], ARGV[5], ARGV[2])
  end
  return token
end
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held then
  local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
  if ARGV[3] == 'fresh' then
    return {1, fence, tonumber(held)}
  end
  local count = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence, count}
end
if ARGV[3] == 'reenter' then
  return {2}
end
local pttl = redis.call('PTTL', KEYS[1])
if ARGV[4] ~= '' then
  register_client(KEYS[3], ARGV[4], pttl)
end
return pttl
