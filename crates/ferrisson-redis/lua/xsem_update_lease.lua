#!lua flags=allow-oom
-- Gives a held permit of an expirable semaphore a new lease, counted from now.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the held permits, a sorted set {permit id: expiry in server ms}
-- ARGV[1]: the permit's id
-- ARGV[2]: new lease in milliseconds
-- Returns: 1 updated; 0 no such permit, or its lease already ran out (an expired permit
--          is not revived: another acquirer may count on reclaiming it).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
return 1
