#!lua flags=allow-oom
-- Releases one hold of a reentrant lock; deletes it and publishes when the last goes.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the lock hash
-- KEYS[2]: the lock's release channel
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds, restored while holds remain
-- ARGV[3]: release id, remembered while holds remain so a retried release is not applied twice
-- Returns: 1 released (key deleted, release published); 2 one hold released, others remain;
--          3 this release id was already applied; 0 no such lock (lease expired);
--          -1 held by another owner.
local marker = 'r:' .. ARGV[3]
local found = redis.call('HMGET', KEYS[1], ARGV[1], marker)
if found[2] then
  return 3
end
if not found[1] then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return 0
  end
  return -1
end
local count = tonumber(found[1]) - 1
if count > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], count, marker, 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 2
end
redis.call('DEL', KEYS[1])
redis.call('SPUBLISH', KEYS[2], 'released')
return 1
