-- Deletes a lock that wakes one client (`Lock`, `SimpleLock`) whoever holds it, and
-- wakes one waiting client. Runs after allow_oom.lua and wake.lua. The lock's layout does
-- not matter: its key is deleted.
-- KEYS[1]: the lock's key
-- KEYS[2]: the waiting clients (see wake.lua)
-- KEYS[3]: prefix of the clients' wake-up channels; the client id completes it
-- Returns: 1 a lock was deleted; 0 there was none.
if redis.call('DEL', KEYS[1]) == 1 then
  wake_one_client(KEYS[2], KEYS[3])
  return 1
end
return 0
