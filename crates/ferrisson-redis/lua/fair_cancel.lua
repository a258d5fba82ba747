-- Removes a waiter from a fair lock's queue (its wait was cancelled or timed out).
-- Runs after allow_oom.lua and fair_queue.lua.
-- KEYS[1]: the lock hash {<owner>: hold count, fence: fencing token}
-- KEYS[2]: the wait queue, a sorted set {<owner>: arrival number}
-- KEYS[3]: the waiters' keep-alive deadlines, a sorted set {<owner>: server time in ms}
-- KEYS[4]: prefix of the per-waiter wake-up channels; the owner id completes it
-- ARGV[1]: owner id
-- Returns: 1 the entry was removed; 0 there was none.
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local evicted = evict_dead_waiters(KEYS[2], KEYS[3], server_time_ms())
-- A head that left while the lock was free may have taken the release message with
-- it: hand the wake-up to the next waiter.
if (removed == 1 or evicted > 0) and redis.call('EXISTS', KEYS[1]) == 0 then
  wake_head(KEYS[2], KEYS[4], 'head')
end
return removed
