#!lua flags=allow-oom
-- Counts a latch down by one; the count reaching zero deletes it and wakes every waiter.
-- allow-oom: a worker must be able to count down (and so open the latch) when memory is
-- full, so this script must never create a key (it only changes or removes one).
-- KEYS[1]: the latch's count
-- KEYS[2]: the latch's channel
-- Returns: the count left (0 when the latch is open, also when it did not exist).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local left = redis.call('DECR', KEYS[1])
if left <= 0 then
  redis.call('DEL', KEYS[1])
  -- 'all': every waiter can go, not just one.
  redis.call('SPUBLISH', KEYS[2], 'all')
  return 0
end
return left
