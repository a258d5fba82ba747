#!lua flags=allow-oom
-- Renews the leases of many held locks in one call (the watchdog's batch).
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1..n]: lock hashes
-- ARGV[1]: lease in milliseconds
-- ARGV[2..n+1]: the owner expected to hold KEYS[i] is ARGV[i + 1]
-- Returns: an array of n integers, 1 renewed, 0 gone or held by another owner.
local renewed = {}
for i, key in ipairs(KEYS) do
  if redis.call('HEXISTS', key, ARGV[i + 1]) == 1 then
    redis.call('PEXPIRE', key, ARGV[1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed
