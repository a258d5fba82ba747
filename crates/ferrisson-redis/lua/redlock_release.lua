#!lua flags=allow-oom
-- Compare-and-delete of a Redlock's key on one of its servers: releases it only if it
-- still holds the owner id, and publishes the release.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the lock key
-- KEYS[2]: the lock's release channel
-- ARGV[1]: owner id
-- Returns: 1 released; 0 no such lock (lease expired); -1 held by another owner.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if current ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
redis.call('SPUBLISH', KEYS[2], 'released')
return 1
