-- Releases one hold of a reentrant lock; deletes it and wakes one waiting client when the
-- last goes. Runs after allow_oom.lua and wake.lua.
-- KEYS[1]: the lock hash
-- KEYS[2]: the waiting clients (see wake.lua)
-- KEYS[3]: prefix of the clients' wake-up channels; the client id completes it
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds, restored while holds remain
-- ARGV[3]: release id, remembered while holds remain so a retried release is not applied twice
-- Returns: 1 released (key deleted, a waiting client woken if any); 2 one hold released, others remain;
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
-- The usual last hold reads '1', compared as text, without `tonumber`'s two parses.
if found[1] ~= '1' then
  local count = tonumber(found[1]) - 1
  if count > 0 then
    redis.call('HSET', KEYS[1], ARGV[1], count, marker, 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 2
  end
end
redis.call('DEL', KEYS[1])
wake_one_client(KEYS[2], KEYS[3])
return 1
