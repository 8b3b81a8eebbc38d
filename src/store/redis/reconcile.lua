-- brownout (store.sync: local_first): one round of an instance's buckets. Each bucket's
-- credit charged on that instance since its last round (µs of bucket time, less refunds;
-- 0: only read) is added to the fleet's bucket, GCRA style, on the Redis server's clock, after
-- the fleet's state is carried to the bucket the instance charged (its step and tolerance;
-- step 0: as it stands), as decide.lua carries it; the reply is the server's time and every
-- bucket's TAT after the round (0: full). Each bucket is field t of its client's hash (see
-- decide.lua), whose expiry is only ever moved later.
-- KEYS: the clients' hashes; ARGV: per key its credit, step and tolerance.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {now}
for i = 1, #KEYS do
  local credit = tonumber(ARGV[3 * i - 2])
  local step, tol = tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  local t = redis.call('HGET', KEYS[i], 't')
  local tat, s, o = 0, step, tol
  if t then
    local x, y, z = string.match(t, '^(%d+):(%d+):(%d+)$')
    if x then tat, s, o = tonumber(x), tonumber(y), tonumber(z) else tat = tonumber(t) or 0 end
  end
  if step == 0 then step, tol = s, o end
  if tat > now and step > 0 and (s ~= step or o ~= tol) then
    local owed = tat - now
    if s ~= step and s > 0 then owed = math.floor(owed * (step / s)) end
    tat = now + math.min(owed, tol)
  end
  if credit ~= 0 then
    tat = math.max(tat, now) + credit
    if tat > now then
      redis.call('HSET', KEYS[i], 't', string.format('%.0f:%d:%d', tat, step, tol))
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
