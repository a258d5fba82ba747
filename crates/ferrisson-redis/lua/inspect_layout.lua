#!lua flags=no-writes
-- Reads what one name holds, in one step, for the inspector to tell which primitive
-- wrote it (the rule is in src/inspect/layout.rs).
-- no-writes: it only reads, so it runs when memory is full.
-- KEYS[1]: the name's main key
-- KEYS[2..n]: companion keys of the name, whose existence is reported
-- Returns: {type of KEYS[1] ('none' when it does not exist), its PTTL,
--           its contents: a string's value, or a hash's field names,
--           1 when the contents were cut short (a string over 64 bytes is left out; a
--             hash over 1,024 fields gives only its 'mode' and 'value' fields, if any),
--           {1 or 0 for each companion key: whether it exists}}
local key = KEYS[1]
local kind = redis.call('TYPE', key)['ok']
local contents = {}
local cut = 0
if kind == 'string' then
  if redis.call('STRLEN', key) <= 64 then
    contents[1] = redis.call('GET', key)
  else
    cut = 1
  end
elseif kind == 'hash' then
  if redis.call('HLEN', key) <= 1024 then
    contents = redis.call('HKEYS', key)
  else
    cut = 1
    for _, field in ipairs({'mode', 'value'}) do
      if redis.call('HEXISTS', key, field) == 1 then
        contents[#contents + 1] = field
      end
    end
  end
end
local companions = {}
for i = 2, #KEYS do
  companions[i - 1] = redis.call('EXISTS', KEYS[i])
end
return {kind, redis.call('PTTL', key), contents, cut, companions}
