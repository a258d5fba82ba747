-- Elects a candidate if nobody leads: SET NX PX with the candidate's owner id, a new term
-- (a fencing token, as every lock's), and a record of the term for observers.
-- Runs after fencing_token.lua, which carries the shebang (no allow-oom).
-- KEYS[1]: the election key (a string holding the leader's owner id, expiring with the lease)
-- KEYS[2]: the fencing floor of the election's hash slot (see fencing_token.lua)
-- KEYS[3]: the record of terms (a stream of the last 64 elections, never expires)
-- KEYS[4]: the channel observers listen on
-- ARGV[1]: owner id, made for this one attempt
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: the candidate's id (a host name, or the owner id)
-- Returns: {1, term, since (server time in ms)} elected (also when the key holds this owner
--          id already: an earlier call of this attempt was elected and its reply lost, so
--          the call is safe to send again); {0, leader's remaining ttl in ms} not elected.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local term = fencing_token(KEYS[2])
  local now = redis.call('TIME')
  local since = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  redis.call('XADD', KEYS[3], 'MAXLEN', '64', '*',
    'owner', ARGV[1], 'id', ARGV[3], 'term', term, 'since', since)
  redis.call('SPUBLISH', KEYS[4], 'all')
  return {1, term, since}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  -- Only this owner's election wrote the record since it took the key.
  local fields = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)[1][2]
  local term, since
  for i = 1, #fields, 2 do
    if fields[i] == 'term' then term = tonumber(fields[i + 1]) end
    if fields[i] == 'since' then since = tonumber(fields[i + 1]) end
  end
  return {1, term, since}
end
return {0, redis.call('PTTL', KEYS[1])}
