#!lua flags=allow-oom
-- Compare-and-pexpire: extends one Redlock node's key only while it still holds the token.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the lock key on this node (a string holding the token)
-- ARGV[1]: token
-- ARGV[2]: new time to live in milliseconds
-- Returns: 1 extended; 0 no such key (expired); -1 held with another token.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if current ~= ARGV[1] then
  return -1
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
