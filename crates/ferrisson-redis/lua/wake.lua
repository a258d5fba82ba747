-- Waking one waiting client, shared by the locks whose release wakes one client, not
-- every client with a waiter (`Lock` and `SimpleLock`); the script's own text follows.
-- Waiting clients register in a sorted set `{name}:waiters`, {<client id>: server time in
-- µs of its registration}, and a client's wake-up channel is the channel prefix
-- `{name}:c:` followed by its client id (the client wakes one of its local waiters on it).
-- One release wakes one client.

-- Registers `client` as waiting, for `pttl` ms more at least (the set outlives every
-- registered waiter's nap, which is at most the holder's remaining lease). A client
-- registered already moves to the back.
local function register_client(waiters, client, pttl)
  local time = redis.call('TIME')
  redis.call('ZADD', waiters, tonumber(time[1]) * 1000000 + tonumber(time[2]), client)
  redis.call('PEXPIRE', waiters, math.max(pttl, 0) + 60000)
end

-- After a grant to a waiter of `client` (the acquire scripts call it only for a caller
-- that registers, whose client id is not '': a first attempt does not pay for the call):
-- with `others` '1' other local waiters of that client still wait, so it stays registered
-- (the release that woke it took its registration) for the new holder's `lease` ms at
-- least (given as its argument's text); otherwise it is taken off: woken by its lease
-- running out or a lost connection rather than by a release, it may still be registered,
-- and a release must not wake it for nothing.
local function granted_to_client(waiters, client, others, lease)
  if others == '1' then
    register_client(waiters, client, tonumber(lease))
  else
    redis.call('ZREM', waiters, client)
  end
end

-- Wakes the client that registered first and is still subscribed: a client whose
-- connection is gone has no subscriber on its channel (SPUBLISH reaches nobody), so the
-- next one is tried. Every client tried is taken off the set: the woken one registers
-- again if it still waits. Returns 1 when a client was woken, 0 when none waits.
local function wake_one_client(waiters, channels)
  -- Most releases find nobody waiting, which EXISTS tells for less than ZPOPMIN's empty
  -- reply (about 0.2 µs of a coalesced pair's 6 on the server alone).
  if redis.call('EXISTS', waiters) == 0 then
    return 0
  end
  while true do
    local first = redis.call('ZPOPMIN', waiters)[1]
    if not first then
      return 0
    end
    if redis.call('SPUBLISH', channels .. first, 'released') > 0 then
      return 1
    end
  end
end
