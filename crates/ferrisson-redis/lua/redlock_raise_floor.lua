#!lua
-- Raises one Redlock server's fencing floor to the token the client chose from the
-- granting majority (the largest of their tokens), so that every later majority, which
-- shares a server with this one, hands out a larger token even where clocks disagree.
-- No allow-oom: it may create the floor key, so with memory full Redis refuses it
-- before it runs.
-- KEYS[1]: the lock key on this server (a string holding the owner id)
-- KEYS[2]: the fencing floor of the lock's hash slot on this server
-- ARGV[1]: owner id of the attempt
-- ARGV[2]: the token chosen, in decimal
-- Returns: 1 the floor is at least the token now; 0 the key no longer holds this owner
--          (expired, or released), so the floor is left alone.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local token = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < token then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
