#!lua flags=allow-oom,allow-cross-slot-keys
-- Renews held locks of every layout whose keys lie in any hash slots of one cluster node,
-- in one call: the watchdog's batch per node on a cluster.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- allow-cross-slot-keys, and no KEYS: a cluster refuses a call whose declared keys lie in
-- several slots, so the keys come as arguments and the server checks each one as the
-- script touches it. A key this node does not serve now (its slot moved, or is moving and
-- the key already went) fails that check before anything of it is read or written; the
-- failure is caught and answered -1, for the client to send that renewal where the
-- slot's owner is (following MOVED and ASK there).
-- ARGV[1]: lease in milliseconds
-- ARGV[2..]: one triple per hold: its layout, its key, its owner. Layouts:
--   'l' a lock hash {owner: hold count} (as lock_renew.lua)
--   'r' a read-write lock hash with one deadline per owner (as rwlock_renew.lua)
--   's' a simple lock string holding its owner (as simple_renew.lua)
--   'p' an expirable semaphore's held-permit set, the owner as the permit (as xsem_renew.lua)
-- Returns: one integer per triple, in order: 1 renewed, 0 gone or held by another owner
--          (a permit: gone or already expired), -1 not served by this node (untouched).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease = tonumber(ARGV[1])

local renew = {}
renew['l'] = function(key, owner)
  if redis.call('HEXISTS', key, owner) == 1 then
    redis.call('PEXPIRE', key, lease)
    return 1
  end
  return 0
end
renew['r'] = function(key, owner)
  local field = 'd:' .. owner
  if redis.call('HEXISTS', key, field) == 1 then
    redis.call('HSET', key, field, now + lease)
    if redis.call('PTTL', key) < lease then
      redis.call('PEXPIRE', key, lease)
    end
    return 1
  end
  return 0
end
renew['s'] = function(key, owner)
  if redis.call('GET', key) == owner then
    redis.call('PEXPIRE', key, lease)
    return 1
  end
  return 0
end
renew['p'] = function(key, owner)
  local current = redis.call('ZSCORE', key, owner)
  if current and tonumber(current) > now then
    redis.call('ZADD', key, 'XX', now + lease, owner)
    return 1
  end
  return 0
end

local renewed = {}
for i = 2, #ARGV, 3 do
  local ok, result = pcall(renew[ARGV[i]], ARGV[i + 1], ARGV[i + 2])
  if ok then
    renewed[#renewed + 1] = result
  else
    renewed[#renewed + 1] = -1
  end
end
return renewed
