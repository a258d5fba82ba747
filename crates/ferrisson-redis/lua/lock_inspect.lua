#!lua flags=no-writes
-- Reads a reentrant lock in one step (a snapshot), for `inspect()`.
-- no-writes: it only reads, so it runs when memory is full (a MULTI of the same reads
-- is refused then).
-- KEYS[1]: the lock hash
-- Returns: {the hash as field, value, ..., its PTTL}.
return {redis.call('HGETALL', KEYS[1]), redis.call('PTTL', KEYS[1])}
