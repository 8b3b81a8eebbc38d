-- brownout: gives back what an admitted request took when a later limiter refused it, and
-- counts failed responses against failure quotas, on the server's clock. (Permits and fleet
-- slots of finished requests are given back with plain HDELs and ZREMs.)
-- KEYS: one per operation. ARGV: per operation a kind and its arguments:
--   'b', increment_us            take a charge back from a bucket;
--   'h', increment_us            likewise from a client's own bucket (field t of its hash);
--   'q', window_us               take one request back from this window's count;
--   'f', sliding, limit, window  count a failure if the quota has room;
--   'g', limit, window, member   likewise in a sliding log (decide.lua), as `member`;
--   'p', member                  give a client's permit back (a field of its hash);
--   'z', member                  give a fleet slot back, or a sliding log's event.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function fmt(x) return string.format('%.0f', x) end
-- A bucket's state ('tat:step:tolerance', or a bare TAT) with `inc` µs given back, in the
-- bucket that wrote it last (decide.lua); nil when there is none.
local function given_back(v, inc)
  if not v then return nil end
  local tat, rest = string.match(v, '^(%d+)(:%d+:%d+)$')
  if not tat then
    tat, rest = tonumber(v), ''
    if not tat then return nil end
  end
  return fmt(math.max(tonumber(tat) - inc, 0)) .. rest
end
local a = 1
for i = 1, #KEYS do
  local kind, key = ARGV[a], KEYS[i]
  if kind == 'b' then
    local v = given_back(redis.call('GET', key), tonumber(ARGV[a + 1]))
    if v then redis.call('SET', key, v, 'KEEPTTL') end
    a = a + 2
  elseif kind == 'h' then
    local v = given_back(redis.call('HGET', key, 't'), tonumber(ARGV[a + 1]))
    if v then redis.call('HSET', key, 't', v) end
    a = a + 2
  elseif kind == 'q' then
    local window = tonumber(ARGV[a + 1])
    local x, y, z = string.match(redis.call('GET', key) or '', '^(%d+) (%d+) (%d+)$')
    if x and tonumber(x) == math.floor(now / window) and tonumber(y) > 0 then
      redis.call('SET', key, x .. ' ' .. fmt(tonumber(y) - 1) .. ' ' .. z, 'KEEPTTL')
    end
    a = a + 2
  elseif kind == 'f' then
    local sliding, limit, window = ARGV[a + 1] == '1', tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    local id = math.floor(now / window)
    local elapsed = now - id * window
    local cur, prev = 0, 0
    local x, y, z = string.match(redis.call('GET', key) or '', '^(%d+) (%d+) (%d+)$')
    if x then
      if tonumber(x) == id then cur, prev = tonumber(y), tonumber(z)
      elseif tonumber(x) == id - 1 then prev = tonumber(y) end
    end
    local estimate = cur
    if sliding then estimate = prev * (1 - elapsed / window) + cur end
    if estimate + 1 <= limit + 1e-9 then
      redis.call('SET', key, fmt(id) .. ' ' .. fmt(cur + 1) .. ' ' .. fmt(prev), 'PX', math.floor(2 * window / 1000))
    end
    a = a + 4
  elseif kind == 'g' then
    local limit, window = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - window))
    if redis.call('ZCARD', key) < limit then
      redis.call('ZADD', key, fmt(now), ARGV[a + 3])
      redis.call('PEXPIRE', key, fmt(math.floor(window / 1000) + 1))
    end
    a = a + 4
  elseif kind == 'p' then
    redis.call('HDEL', key, ARGV[a + 1])
    a = a + 2
  elseif kind == 'z' then
    redis.call('ZREM', key, ARGV[a + 1])
    a = a + 2
  else
    return redis.error_reply('brownout undo: unknown operation ' .. tostring(kind))
  end
end
return #KEYS
