#!lua
-- Adds (or, with a negative delta, removes) permits; creates the counter when missing,
-- as Redisson's addPermits does. Also used by the expirable semaphore, whose counter
-- holds its free permits the same way.
-- No allow-oom: with memory full, Redis refuses this script before it runs (without a
-- shebang it would be refused only at its first denyoom command, if no write came first).
-- KEYS[1]: the semaphore's available-permit counter
-- KEYS[2]: the semaphore's release channel
-- ARGV[1]: delta (non-zero; may be negative)
-- Returns: the counter after the change (may be negative).
local value = redis.call('INCRBY', KEYS[1], ARGV[1])
local delta = tonumber(ARGV[1])
if delta > 0 then
  redis.call('SPUBLISH', KEYS[2], ARGV[1])
end
return value
