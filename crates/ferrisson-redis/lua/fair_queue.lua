-- The fair lock's queue functions, shared by its acquire, release, cancel and forced
-- release; the script's own text follows. The queue is a sorted set {<owner>: arrival
-- number}, the keep-alive deadlines another {<owner>: server time in ms}, and a waiter's
-- wake-up channel is the channel prefix followed by its owner id.

-- The server's time in milliseconds, so that client clock skew cannot kill a live waiter
-- or keep a dead one.
local function server_time_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Removes the waiters that stopped refreshing their entry by `now`: they have died and
-- must not stall the queue. Returns how many were removed.
local function evict_dead_waiters(queue, deadlines, now)
  local dead = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now)
  for _, waiter in ipairs(dead) do
    redis.call('ZREM', queue, waiter)
    redis.call('ZREM', deadlines, waiter)
  end
  return #dead
end

-- Wakes the queue's head, if there is one, with `message`.
local function wake_head(queue, channels, message)
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if head then
    redis.call('SPUBLISH', channels .. head, message)
  end
end

