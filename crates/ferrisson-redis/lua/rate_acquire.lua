#!lua
-- Takes permits from a rate limiter's token bucket, kept as one timestamp (the generic
-- cell rate algorithm): the server time at which the bucket would be full again. All
-- times are the server's clock, in microseconds, so clients' clocks never matter.
-- No allow-oom: with memory full, Redis refuses this script before it runs.
-- KEYS[1]: the limiter's key (a string: that timestamp; expires when the bucket is full)
-- ARGV[1]: emission interval in microseconds (the time one permit takes to come back)
-- ARGV[2]: burst: how many permits a full bucket holds
-- ARGV[3]: permits asked for (1..burst)
-- Returns: {1, permits left after this grant}; {0, microseconds until the asked permits
--          are due} (nothing is taken then).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local asked = tonumber(ARGV[3])
local full_at = tonumber(redis.call('GET', KEYS[1]) or '0')
if full_at < now then
  full_at = now
end
local next_full_at = full_at + asked * interval
local allowed_at = next_full_at - burst * interval
if allowed_at > now then
  return {0, allowed_at - now}
end
redis.call('SET', KEYS[1], string.format('%d', next_full_at),
  'PX', string.format('%d', math.ceil((next_full_at - now) / 1000)))
return {1, math.floor((now - allowed_at) / interval)}
