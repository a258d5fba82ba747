#!lua flags=allow-oom
-- Deletes a latch whatever its count, which opens it: every waiter is woken and goes.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the latch's count
-- KEYS[2]: the latch's channel
-- Returns: 1 a latch was deleted; 0 there was none.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('SPUBLISH', KEYS[2], 'all')
  return 1
end
return 0
