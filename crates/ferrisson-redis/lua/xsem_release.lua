-- Returns one permit of an expirable semaphore by its id and wakes one waiter.
-- Runs after allow_oom.lua and server_clock.lua.
-- KEYS[1]: the semaphore's free-permit counter
-- KEYS[2]: the held permits, a sorted set {permit id: expiry in server ms}
-- KEYS[3]: the semaphore's release channel
-- ARGV[1]: the permit's id
-- Returns: 1 returned; 2 returned, but its lease had already run out (an acquire would
--          have reclaimed it); 0 no such permit (already released or reclaimed).
-- Removing the id first makes a retried release a no-op.
local expiry = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not expiry then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
-- A counter that is gone (deleted or evicted on its own) is not recreated: that would
-- revive the semaphore with one permit, and this script may run with memory full.
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('INCR', KEYS[1])
end
redis.call('SPUBLISH', KEYS[3], 1)
local now = batch_clock or read_clock()
if tonumber(expiry) <= now then
  return 2
end
return 1
