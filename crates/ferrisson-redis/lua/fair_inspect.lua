#!lua flags=no-writes
-- Reads a fair lock in one step (a snapshot), for `inspect()`.
-- no-writes: it only reads, so it runs when memory is full (a MULTI of the same reads
-- is refused then).
-- KEYS[1]: the lock hash
-- KEYS[2]: the wait queue
-- KEYS[3]: the waiters' deadlines
-- Returns: {hash fields and values, PTTL of the hash, queue members in order,
--           deadlines as member, score, ..., the server's TIME}.
return {
  redis.call('HGETALL', KEYS[1]),
  redis.call('PTTL', KEYS[1]),
  redis.call('ZRANGE', KEYS[2], 0, -1),
  redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES'),
  redis.call('TIME'),
}
