-- Deletes a latch whatever its count, which opens it: every waiter is woken and goes.
-- KEYS[1]: the latch's count
-- KEYS[2]: the latch's channel
-- Returns: 1 a latch was deleted; 0 there was none.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', KEYS[2], 'all')
  return 1
end
return 0
