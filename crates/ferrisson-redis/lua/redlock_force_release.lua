#!lua flags=allow-oom
-- Deletes a Redlock's key on one of its servers whoever holds it, and publishes the
-- release (`Redlock::force_unlock`).
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the lock key
-- KEYS[2]: the lock's release channel
-- Returns: 1 a lock was deleted; 0 there was none.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('SPUBLISH', KEYS[2], 'released')
  return 1
end
return 0
