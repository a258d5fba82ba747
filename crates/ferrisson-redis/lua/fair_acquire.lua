-- Acquires, re-enters or queues for a fair lock: granted strictly in queue order.
-- Runs after fencing_token.lua, which carries the shebang (no allow-oom), and
-- fair_queue.lua.
-- KEYS[1]: the lock hash {<owner>: hold count, fence: fencing token} (a Lock's layout)
-- KEYS[2]: the fencing floor of the lock's hash slot (see fencing_token.lua)
-- KEYS[3]: the wait queue, a sorted set {<owner>: arrival number}
-- KEYS[4]: the waiters' keep-alive deadlines, a sorted set {<owner>: server time in ms}
-- KEYS[5]: prefix of the per-waiter wake-up channels; the owner id completes it
-- ARGV[1]: owner id
-- ARGV[2]: lease in milliseconds
-- ARGV[3]: 'acquire' (queue when not granted), 'try' (never queue), or 'reenter' (only
--          add a hold to one this owner has: it believes it holds the lock). In 'acquire'
--          and 'try' the owner id is the waiter's own, so finding it holding the lock
--          means an earlier call of this wait was granted (its reply was lost): the hold
--          is reported, not doubled, and the call is safe to send again.
-- ARGV[4]: waiter keep-alive in milliseconds: the entry dies unless refreshed within it
-- Returns: {1, fencing token, hold count} when acquired or re-entered;
--          {0, holder's remaining ttl in ms (-1 no expiry, -2 free), position in the
--           queue (0 = head, -1 not queued), 1 if the entry was created by this call};
--          {2} in 'reenter' mode when this owner no longer holds the lock.
local owner = ARGV[1]
local now = server_time_ms()
local evicted = evict_dead_waiters(KEYS[3], KEYS[4], now)

local held = redis.call('HGET', KEYS[1], owner)
if held then
  local fence = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
  if ARGV[3] ~= 'reenter' then
    return {1, fence, tonumber(held)}
  end
  local count = redis.call('HINCRBY', KEYS[1], owner, 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence, count}
end
if ARGV[3] == 'reenter' then
  return {2}
end

local free = redis.call('EXISTS', KEYS[1]) == 0
local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if free and (head == nil or head == owner) then
  redis.call('ZREM', KEYS[3], owner)
  redis.call('ZREM', KEYS[4], owner)
  local token = fencing_token(KEYS[2])
  redis.call('HSET', KEYS[1], owner, 1, 'fence', token)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, token, 1}
end
-- The lock is free but reserved for a head that took over from an evicted one: that
-- head got no release message, so wake it now.
if free and evicted > 0 and head ~= owner then
  redis.call('SPUBLISH', KEYS[5] .. head, 'head')
end
if ARGV[3] == 'try' then
  return {0, redis.call('PTTL', KEYS[1]), -1, 0}
end

local created = 0
if not redis.call('ZSCORE', KEYS[3], owner) then
  local tail = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  local arrival = 0
  if tail[2] then
    arrival = tonumber(tail[2]) + 1
  end
  redis.call('ZADD', KEYS[3], arrival, owner)
  created = 1
end
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[4]), owner)
-- Every live entry's deadline is at most one keep-alive after the latest refresh, so an
-- abandoned queue disappears on its own.
redis.call('PEXPIRE', KEYS[3], ARGV[4])
redis.call('PEXPIRE', KEYS[4], ARGV[4])
return {0, redis.call('PTTL', KEYS[1]), redis.call('ZRANK', KEYS[3], owner), created}
