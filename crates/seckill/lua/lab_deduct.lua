-- KEYS[1]: the lab's stock counter (a decimal integer)
-- KEYS[2]: the lab's sold counter
-- Returns: 1 when one unit was sold, 0 when the stock is exhausted, -1 when no stock is set
-- Check and decrement in one script: Redis runs it atomically, so no lock is needed.
local stock = tonumber(redis.call('GET', KEYS[1]))
if stock == nil then
  return -1
end
if stock > 0 then
  redis.call('DECR', KEYS[1])
  redis.call('INCR', KEYS[2])
  return 1
end
return 0
