-- A client's last local waiter of a reentrant lock stopped waiting without the lock (its
-- wait ran out, its future was dropped): the client is no longer registered as waiting,
-- and if the lock is free, the next waiting client is woken, since this waiter may have
-- taken the wake-up meant for it. Runs after allow_oom.lua and lock_wake.lua.
-- KEYS[1]: the lock hash
-- KEYS[2]: the waiting clients (see lock_wake.lua)
-- KEYS[3]: prefix of the clients' wake-up channels; the client id completes it
-- ARGV[1]: the client id
-- Returns: 1 a waiting client was woken; 0 none was.
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
return wake_one_client(KEYS[2], KEYS[3])
