#!lua flags=allow-oom
-- Returns one permit of an expirable semaphore by its id and wakes one waiter.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
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
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if tonumber(expiry) <= now then
  return 2
end
return 1
