-- Removes an owner's hold outright: undoes an acquire whose caller went away. Only used
-- for a fresh owner id, which no other guard shares.
-- Runs after allow_oom.lua and wake.lua.
-- KEYS[1]: the lock hash
-- KEYS[2]: the waiting clients (see wake.lua)
-- KEYS[3]: prefix of the clients' wake-up channels; the client id completes it
-- ARGV[1]: owner id
-- Returns: 1 the owner held it and it is now free; 0 the owner did not hold it.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[1])
wake_one_client(KEYS[2], KEYS[3])
return 1
