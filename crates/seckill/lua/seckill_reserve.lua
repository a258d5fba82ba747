-- KEYS[1]: the voucher's stock in Redis ({seckill:ID}:stock, a decimal integer)
-- KEYS[2]: the set of users who bought it ({seckill:ID}:buyers)
-- ARGV[1]: the buying user's id
-- Returns: 0 reserved (stock decremented, user added), 1 sold out, 2 already ordered,
--          -1 stock not loaded
-- Stock and one-order-per-user checked and taken in one
-- atomic step, so the order flow needs no lock.
local stock = tonumber(redis.call('GET', KEYS[1]))
if stock == nil then
  return -1
end
if stock <= 0 then
  return 1
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return 2
end
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
return 0
