#!lua
-- The first part of every acquire script that starts a new hold with a fencing token
-- (lock, fair, rwlock, simple and redlock acquires): the script's own text follows it.
-- No allow-oom: these scripts create keys, so with memory full Redis refuses them before
-- they run (without a shebang they would be refused only at their first denyoom command,
-- if no write came first).
--
-- fencing_token(floor) returns a new token, as a number and as the text stored in Redis.
-- The token is the server's clock in microseconds (TIME: Redis 7 replicates a script's
-- effects, not the script, so reading the clock before writing is allowed), or one more
-- than `floor` when the clock is not ahead of it. `floor` is the high-water mark of every
-- token handed out in the lock's hash slot (`ferrisson:fence:{tag}`, one key per slot,
-- not one per lock name); it is raised to the new token. So the tokens of one lock grow
-- with every new holder, and keep growing across a restart that lost the floor or a
-- failover to a replica that missed it, as long as the new server's clock is not behind
-- the old one. Lua numbers are doubles: exact up to 2^53, and microseconds since 1970
-- are about 1.7e15.
--
-- In the batch form of a script (several acquires in one call, see
-- `backend/scripts/mod.rs`) the clock is read once for all of them, into `batch_time`,
-- before the first; alone it is nil and each call reads the clock. The floor still makes
-- each token of a slot strictly greater than every earlier one.
local batch_time
local function fencing_token(floor)
  local time = batch_time or redis.call('TIME')
  local token = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local text = string.format('%.0f', token)
  -- One call on the usual path: write the clock's value and read what it replaced. Only
  -- when the floor was not behind the clock is it written a second time, one above.
  local highest = tonumber(redis.call('SET', floor, text, 'GET') or '0')
  if token <= highest then
    token = highest + 1
    text = string.format('%.0f', token)
    redis.call('SET', floor, text)
  end
  return token, text
end

