#!lua flags=allow-oom
-- Withdraws a waiting writer's intent (its wait was cancelled or timed out), letting the
-- readers it held back in.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the lock hash (layout in rwlock_acquire.lua)
-- KEYS[2]: the channel read waiters listen on
-- ARGV[1]: owner id of the writer that stops waiting
-- Returns: 1 the intent was withdrawn; 0 there was none.
if redis.call('HDEL', KEYS[1], 'i:' .. ARGV[1]) == 0 then
  return 0
end
redis.call('SPUBLISH', KEYS[2], 'all')
return 1
