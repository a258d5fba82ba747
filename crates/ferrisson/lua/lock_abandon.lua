#!lua flags=allow-oom
-- Removes an owner's hold outright: undoes an acquire whose caller went away. Only used
-- for a fresh owner id, which no other guard shares.
-- allow-oom: what is held must stay renewable and releasable when memory is full, so
-- this script must never create a key (it only changes or removes existing entries).
-- KEYS[1]: the lock hash
-- KEYS[2]: the lock's release channel
-- ARGV[1]: owner id
-- Returns: 1 the owner held it and it is now free; 0 the owner did not hold it.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SPUBLISH', KEYS[2], 'released')
return 1
