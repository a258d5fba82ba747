#!lua
-- Takes permits from a semaphore if enough are available.
-- No allow-oom: with memory full, Redis refuses this script before it runs (without a
-- shebang it would be refused only at its first denyoom command, if no write came first).
-- KEYS[1]: the semaphore's available-permit counter
-- ARGV[1]: number of permits wanted (>= 1)
-- Returns: 1 acquired; 0 not enough permits available; -1 the semaphore does not exist
--          (never initialised, or deleted), so waiting for it would never succeed.
local available = redis.call('GET', KEYS[1])
if not available then
  return -1
end
-- One permit, the usual want, needs a count that is neither 0 nor negative, which its text
-- tells (byte 45 is '-') without the two parses of each text that `tonumber` makes.
local enough
if ARGV[1] == '1' then
  enough = available ~= '0' and string.byte(available) ~= 45
else
  enough = tonumber(available) >= tonumber(ARGV[1])
end
if enough then
  redis.call('DECRBY', KEYS[1], ARGV[1])
  return 1
end
return 0
