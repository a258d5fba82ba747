-- The reentrant lock's wake-up, shared by its release, abandon, withdraw and forced
-- release; the script's own text follows. Waiting clients register in a sorted set
-- {<client id>: server time in µs of its registration}, and a client's wake-up channel
-- is the channel prefix followed by its client id (the client wakes one of its local
-- waiters on it). One release wakes one client, not every client with a waiter.

-- Wakes the client that registered first and is still subscribed: a client whose
-- connection is gone has no subscriber on its channel (SPUBLISH reaches nobody), so the
-- next one is tried. Every client tried is taken off the set: the woken one registers
-- again if it still waits. Returns 1 when a client was woken, 0 when none waits.
local function wake_one_client(waiters, channels)
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
