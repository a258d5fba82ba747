-- KEYS[1]: the voucher's stock in Redis ({seckill:ID}:stock)
-- KEYS[2]: the set of users who bought it ({seckill:ID}:buyers)
-- ARGV[1]: the user id whose reservation is given back
-- Returns: 1 when the reservation was given back, 0 when the user held none
-- Undoes seckill_reserve when the database refused the order, so Redis and the
-- database agree on the stock.
if redis.call('SREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('INCR', KEYS[1])
  return 1
end
return 0
