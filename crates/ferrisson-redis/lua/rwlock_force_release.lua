#!lua flags=allow-oom
-- Deletes a read-write lock whoever holds it (every reader and the writer) and wakes
-- its waiters.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the lock hash (layout in rwlock_acquire.lua)
-- KEYS[2]: the channel read waiters listen on
-- KEYS[3]: the channel write waiters listen on
-- Returns: 1 a lock was deleted; 0 there was none.
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
redis.call('SPUBLISH', KEYS[2], 'all')
redis.call('SPUBLISH', KEYS[3], 'released')
return 1
