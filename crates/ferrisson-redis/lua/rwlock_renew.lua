#!lua flags=allow-oom
-- Renews the leases of many read-write lock holders in one call (the watchdog's batch).
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1..n]: read-write lock hashes (layout in rwlock_acquire.lua)
-- ARGV[1]: lease in milliseconds
-- ARGV[2..n+1]: the owner whose holds on KEYS[i] are renewed is ARGV[i + 1]
-- Returns: an array of n integers, 1 renewed, 0 the owner holds nothing there any more.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease = tonumber(ARGV[1])
local renewed = {}
for i, key in ipairs(KEYS) do
  local field = 'd:' .. ARGV[i + 1]
  if redis.call('HEXISTS', key, field) == 1 then
    redis.call('HSET', key, field, now + lease)
    if redis.call('PTTL', key) < lease then
      redis.call('PEXPIRE', key, lease)
    end
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
