#!lua flags=allow-oom
-- Renews the leases of many held expirable permits in one call (the watchdog's batch).
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1..n]: held-permit sorted sets {permit id: expiry in server ms}
-- ARGV[1]: lease in milliseconds
-- ARGV[2..n+1]: the permit renewed in KEYS[i] is ARGV[i + 1]
-- Returns: an array of n integers, 1 renewed, 0 the permit is gone or its lease already
--          ran out (an expired permit is not revived: another acquirer may count on
--          reclaiming it).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local expiry = now + tonumber(ARGV[1])
local renewed = {}
for i, key in ipairs(KEYS) do
  local current = redis.call('ZSCORE', key, ARGV[i + 1])
  if current and tonumber(current) > now then
    redis.call('ZADD', key, 'XX', expiry, ARGV[i + 1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
