#!lua
-- Writes a value unless a holder with a newer fencing token has written before.
-- No allow-oom: with memory full, Redis refuses this script before it runs (without a
-- shebang it would be refused only at its first denyoom command, if no write came first).
-- KEYS[1]: the resource hash {value: bytes, fence: highest token accepted}
-- ARGV[1]: value
-- ARGV[2]: fencing token of the writer
-- Returns: {1, token} written; {0, highest token seen} refused as stale.
local highest = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
local token = tonumber(ARGV[2])
if token < highest then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'value', ARGV[1], 'fence', ARGV[2])
return {1, token}
