#!lua flags=no-writes
-- Reads who leads an election now and the terms recorded after a given one, in one read.
-- KEYS[1]: the election key
-- KEYS[2]: the record of terms
-- ARGV[1]: the record id of the last term the caller has seen, or '' for only the latest
-- Returns: {leader's owner id (nil when nobody leads), its remaining ttl in ms,
--           the terms as stream entries {id, {field, value, ...}}, oldest first}
local leader = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local terms
if ARGV[1] == '' then
  terms = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
else
  terms = redis.call('XRANGE', KEYS[2], '(' .. ARGV[1], '+')
end
return {leader, pttl, terms}
