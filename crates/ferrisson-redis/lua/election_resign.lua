#!lua flags=allow-oom
-- Ends a leader's term if it still leads: deletes the election key, wakes one waiting
-- candidate per client and every observer.
-- allow-oom: stepping down must work when memory is full; this script creates no key.
-- KEYS[1]: the election key
-- KEYS[2]: the channel candidates wait on
-- KEYS[3]: the channel observers listen on
-- ARGV[1]: the leader's owner id
-- Returns: 1 resigned; 0 nobody leads (the term ran out); -1 another owner leads.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if current ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
redis.call('SPUBLISH', KEYS[2], 'released')
redis.call('SPUBLISH', KEYS[3], 'all')
return 1
