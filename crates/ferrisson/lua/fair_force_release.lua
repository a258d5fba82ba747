#!lua flags=allow-oom
-- Deletes a fair lock whoever holds it and wakes the head of its queue.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the lock hash {<owner>: hold count, fence: fencing token}
-- KEYS[2]: the wait queue, a sorted set {<owner>: arrival number}
-- KEYS[3]: the waiters' keep-alive deadlines, a sorted set {<owner>: server time in ms}
-- KEYS[4]: prefix of the per-waiter wake-up channels; the owner id completes it
-- Returns: 1 a lock was deleted; 0 there was none.
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
-- As a release: only the head may take the lock now; a dead head is skipped.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, waiter in ipairs(dead) do
  redis.call('ZREM', KEYS[2], waiter)
  redis.call('ZREM', KEYS[3], waiter)
end
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if head then
  redis.call('PUBLISH', KEYS[4] .. head, 'released')
end
return 1
