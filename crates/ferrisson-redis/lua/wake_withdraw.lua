-- A client's last local waiter of a lock that wakes one client (`Lock`, `SimpleLock`)
-- stopped waiting without the lock (its wait ran out, its future was dropped), or a
-- wake-up reached the client when none of its tasks waited any more: the client is no
-- longer registered as waiting, and if the lock is free, the next waiting client is
-- woken, since this one may have taken the wake-up meant for it. Runs after allow_oom.lua
-- and wake.lua. The lock's layout does not matter: only whether its key exists.
-- KEYS[1]: the lock's key
-- KEYS[2]: the waiting clients (see wake.lua)
-- KEYS[3]: prefix of the clients' wake-up channels; the client id completes it
-- ARGV[1]: the client id
-- Returns: 1 a waiting client was woken; 0 none was.
-- Safe to run twice: a second run finds the client gone, and wakes a client only if the
-- lock is still free.
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
return wake_one_client(KEYS[2], KEYS[3])
