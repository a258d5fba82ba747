#!lua flags=no-writes
-- Reads one Redlock node's key in one step (a snapshot), for `inspect()`.
-- no-writes: it only reads, so it runs when memory is full (a MULTI of the same reads
-- is refused then).
-- KEYS[1]: the lock key
-- Returns: {the holder's token or nil, PTTL of the key}.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
