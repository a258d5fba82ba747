-- Deletes a lock whoever holds it and wakes its waiters.
-- KEYS[1]: the lock key
-- KEYS[2]: the lock's release channel
-- Returns: 1 a lock was deleted; 0 there was none.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', KEYS[2], 'released')
  return 1
end
return 0
