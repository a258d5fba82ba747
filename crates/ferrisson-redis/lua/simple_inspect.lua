#!lua flags=no-writes
-- Reads a simple lock's key, or one Redlock server's, in one step (a snapshot), for
-- `inspect()`.
-- no-writes: it only reads, so it runs when memory is full (a MULTI of the same reads
-- is refused then).
-- KEYS[1]: the lock key
-- Returns: {the holder's owner id or nil, PTTL of the key}.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
