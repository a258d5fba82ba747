-- Compare-and-delete: releases a non-reentrant lock only if it still holds the owner id,
-- and wakes one waiting client (see wake.lua). Also undoes an acquire whose caller went
-- away (the owner id is that attempt's alone). Runs after allow_oom.lua and wake.lua.
-- KEYS[1]: the lock key
-- KEYS[2]: the waiting clients (see wake.lua)
-- KEYS[3]: prefix of the clients' wake-up channels; the client id completes it
-- ARGV[1]: owner id
-- Returns: 1 released (a waiting client woken if any); 0 no such lock (lease expired);
--          -1 held by another owner. A repeat of a release that worked finds the key gone
--          or another owner's, which the caller reads as the first try having worked; it
--          wakes nobody (the first try did).
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if current ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
wake_one_client(KEYS[2], KEYS[3])
return 1
