#!lua
-- The first part of every acquire script that starts a new hold with a fencing token
-- (lock, fair, rwlock, simple and redlock acquires): the script's own text follows it.
-- No allow-oom: these scripts create keys, so with memory full Redis refuses them before
-- they run (without a shebang they would be refused only at their first denyoom command,
-- if no write came first).
--
-- fencing_token(floor) returns a new token, as the text stored in Redis (a script's reply
-- carries it as that text too). The token is the server's clock in microseconds (TIME:
-- Redis 7 replicates a script's effects, not the script, so reading the clock before
-- writing is allowed), or one more than `floor` when the clock is not ahead of it.
-- `floor` is the high-water mark of every token handed out by the locks that share it
-- (`ferrisson:fence:{tag}`: on a cluster one per hash slot, in the lock's slot; on one
-- server or behind Sentinel one per namespace); it is raised to the new token. So the
-- tokens of one lock grow with every new holder, and keep growing across a restart that
-- lost the floor or a failover to a replica that missed it, as long as the new server's
-- clock is not behind the old one.
--
-- The usual path works on text alone: converting numbers to and from text (`tonumber`,
-- `string.format`) cost Redis about as much as the call that writes the floor. Every
-- token is written without leading zeros, so of two tokens the longer text is the
-- greater, and of two of one length the one that sorts later (the clock has 16 digits
-- until 2286). Only when the floor is not behind the clock is a number made, one above
-- the floor: Lua numbers are doubles, exact up to 2^53, and microseconds since 1970 are
-- about 1.7e15.
--
-- In the batch form of a script (several acquires in one call, see
-- `backend/scripts/mod.rs`) the clock is read once for all of them, into `batch_clock`,
-- before the first, and each floor is read once, into `batch_floors` {floor: highest
-- token}, and written once, after the last (`write_batch_floors`): the calls of a batch
-- share their floor (one per server, or the batch's one slot on a cluster), so a batch
-- of n acquires writes it once, not n times. Nothing runs between the calls of one
-- script, so no one sees the floor before it is written; a call that fails after its
-- token was made still raised it. Alone both are nil and each call reads the clock and
-- writes the floor. Either way each token under a floor is strictly greater than every
-- earlier one.
local batch_clock
local batch_floors
local function read_clock()
  local time = redis.call('TIME')
  return time[1] .. string.sub('00000' .. time[2], -6)
end
local function is_behind(text, highest)
  return #highest > #text or (#highest == #text and highest >= text)
end
local function fencing_token(floor)
  local text = batch_clock or read_clock()
  if batch_floors then
    local highest = batch_floors[floor] or redis.call('GET', floor)
    if highest and is_behind(text, highest) then
      text = string.format('%.0f', tonumber(highest) + 1)
    end
    batch_floors[floor] = text
    return text
  end
  -- One call on the usual path: write the clock's value and read what it replaced. Only
  -- when the floor was not behind the clock is it written a second time, one above.
  local highest = redis.call('SET', floor, text, 'GET')
  if highest and is_behind(text, highest) then
    text = string.format('%.0f', tonumber(highest) + 1)
    redis.call('SET', floor, text)
  end
  return text
end
local function write_batch_floors()
  for floor, text in pairs(batch_floors) do
    redis.call('SET', floor, text)
  end
end
