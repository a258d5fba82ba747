-- Releases one hold of a fair lock; on the last, deletes it and wakes the queue's head.
-- Runs after allow_oom.lua and fair_queue.lua.
-- KEYS[1]: the lock hash {<owner>: hold count, fence: fencing token}
-- KEYS[2]: the wait queue, a sorted set {<owner>: arrival number}
-- KEYS[3]: the waiters' keep-alive deadlines, a sorted set {<owner>: server time in ms}
-- KEYS[4]: prefix of the per-waiter wake-up channels; the owner id completes it
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds, restored while holds remain
-- ARGV[3]: release id, remembered while holds remain so a retried release is not applied twice
-- Returns: 1 released (key deleted, head woken); 2 one hold released, others remain;
--          3 this release id was already applied; 0 no such lock (lease expired);
--          -1 held by another owner.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local marker = 'r:' .. ARGV[3]
if redis.call('HEXISTS', KEYS[1], marker) == 1 then
  return 3
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local count = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if count > 0 then
  redis.call('HSET', KEYS[1], marker, 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 2
end
redis.call('DEL', KEYS[1])

-- Only the head may take the lock now, so only the head is woken; a dead head is
-- skipped when its keep-alive already ran out.
evict_dead_waiters(KEYS[2], KEYS[3], server_time_ms())
wake_head(KEYS[2], KEYS[4], 'released')
return 1
