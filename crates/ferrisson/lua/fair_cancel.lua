#!lua flags=allow-oom
-- Removes a waiter from a fair lock's queue (its wait was cancelled or timed out).
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the lock hash {<owner>: hold count, fence: fencing token}
-- KEYS[2]: the wait queue, a sorted set {<owner>: arrival number}
-- KEYS[3]: the waiters' keep-alive deadlines, a sorted set {<owner>: server time in ms}
-- KEYS[4]: prefix of the per-waiter wake-up channels; the owner id completes it
-- ARGV[1]: owner id
-- Returns: 1 the entry was removed; 0 there was none.
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, waiter in ipairs(dead) do
  redis.call('ZREM', KEYS[2], waiter)
  redis.call('ZREM', KEYS[3], waiter)
end
-- A head that left while the lock was free may have taken the release message with
-- it: hand the wake-up to the next waiter.
if (removed == 1 or #dead > 0) and redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if head then
    redis.call('PUBLISH', KEYS[4] .. head, 'head')
  end
end
return removed
