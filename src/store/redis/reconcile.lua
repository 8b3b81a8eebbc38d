-- brownout (store.sync: local_first): one round of an instance's buckets. Each bucket's
-- credit charged on that instance since its last round (µs of bucket time, less refunds;
-- 0: only read) is added to the fleet's bucket, GCRA style, on the Redis server's clock; the
-- reply is the server's time and every bucket's TAT after the round (0: full). Each bucket is
-- field t of its client's hash (see decide.lua), whose expiry is only ever moved later.
-- KEYS: the clients' hashes; ARGV: the credit of each.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {now}
for i = 1, #KEYS do
  local credit = tonumber(ARGV[i])
  local t = redis.call('HGET', KEYS[i], 't')
  local tat = tonumber(t or '0') or 0
  if credit ~= 0 then
    tat = math.max(tat, now) + credit
    if tat > now then
      redis.call('HSET', KEYS[i], 't', string.format('%.0f', tat))
      local keep = math.floor((tat - now) / 1000) + 1
      if t then
        redis.call('PEXPIRE', KEYS[i], keep, 'GT')
      else
        redis.call('PEXPIRE', KEYS[i], keep)
      end
    elseif t then
      redis.call('HSET', KEYS[i], 't', '0')
    end
  end
  if tat <= now then tat = 0 end
  out[i + 1] = tat
end
return out
