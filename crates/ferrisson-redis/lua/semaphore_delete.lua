#!lua flags=allow-oom
-- Deletes a semaphore and wakes every waiter, so they fail at once with "not
-- initialised" instead of waiting for permits that will never come. Also used by the
-- expirable semaphore (KEYS[1] counter, KEYS[2] held permits, KEYS[3] channel).
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1..n-1]: the semaphore's keys
-- KEYS[n]: the semaphore's release channel
-- Returns: the number of keys deleted.
local channel = table.remove(KEYS)
local deleted = redis.call('DEL', unpack(KEYS))
if deleted > 0 then
  redis.call('SPUBLISH', channel, 'all')
end
return deleted
