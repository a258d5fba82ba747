#!lua flags=allow-oom
-- Returns permits to a semaphore and wakes as many waiters as permits came back.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the semaphore's available-permit counter
-- KEYS[2]: the semaphore's release channel
-- ARGV[1]: number of permits returned (>= 1)
-- Returns: 1 returned; 0 the semaphore no longer exists (deleted while the permits were
--          out), so nothing is recreated.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('INCRBY', KEYS[1], ARGV[1])
-- The payload is a count: each client wakes that many of its local waiters.
redis.call('SPUBLISH', KEYS[2], ARGV[1])
return 1
