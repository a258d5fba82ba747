#!lua flags=no-writes
-- Reads an expirable semaphore without changing it: expired permits are counted as
-- free, as the next acquire will reclaim them.
-- no-writes: it only reads, so it runs when memory is full.
-- KEYS[1]: the semaphore's free-permit counter
-- KEYS[2]: the held permits, a sorted set {permit id: expiry in server ms}
-- ARGV[1]: at most this many held permits to list, earliest expiry first
-- Returns: {0} the semaphore does not exist;
--          {1, free permits, live held permits, id1, ms left1, id2, ms left2, ...}.
local free = redis.call('GET', KEYS[1])
if not free then
  return {0}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local expired = redis.call('ZCOUNT', KEYS[2], '-inf', now)
local live = redis.call('ZCARD', KEYS[2]) - expired
local reply = {1, tonumber(free) + expired, live}
local limit = tonumber(ARGV[1])
if limit > 0 then
  local held = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #held, 2 do
    reply[#reply + 1] = held[i]
    reply[#reply + 1] = tonumber(held[i + 1]) - now
  end
end
return reply
