-- Deletes a fair lock whoever holds it and wakes the head of its queue.
-- Runs after allow_oom.lua and fair_queue.lua.
-- KEYS[1]: the lock hash {<owner>: hold count, fence: fencing token}
-- KEYS[2]: the wait queue, a sorted set {<owner>: arrival number}
-- KEYS[3]: the waiters' keep-alive deadlines, a sorted set {<owner>: server time in ms}
-- KEYS[4]: prefix of the per-waiter wake-up channels; the owner id completes it
-- Returns: 1 a lock was deleted; 0 there was none.
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
-- As a release: only the head may take the lock now; a dead head is skipped.
evict_dead_waiters(KEYS[2], KEYS[3], server_time_ms())
wake_head(KEYS[2], KEYS[4], 'released')
return 1
