-- brownout: one request's shared limiters in one atomic step on the Redis server's clock:
-- request_rate (GCRA buckets, then window quotas), concurrent_requests (the client's permits)
-- and fleet_usage (the fleet's set of non-critical slots), in the chain's order.
-- The arithmetic is that of src/math/gcra.rs and src/math/window.rs. An enforced refusal
-- stops the script with nothing written (a refused request takes nothing); a refusal in dark
-- mode writes nothing for that limiter and goes on. Times are whole µs, written with '%d'.
--
-- A client's own bucket and its permits share one hash (`{client}:client`; an IP's own
-- bucket likewise, `{ip}:client`): field `t` is the bucket's TAT (0: full; present whenever
-- the hash is), every other field a permit, valued when it was taken. So a request reads the
-- pair with HGET and HLEN and writes both with one HSET. Permits older than the TTL (their
-- server died) are swept when the client looks full; the hash expires once both its bucket
-- would be full again and its newest permit is past the TTL (an expiry is only ever moved
-- later). The fleet's slots are members of a sorted set scored by when they were taken,
-- swept the same way.
--
-- KEYS: the buckets (nb; the client's own is its hash), the quota counters (nq), the client's
--       hash if a permit is asked, the fleet's slot set if asked.
-- ARGV: nb, nq, in_flight (0|1), rate_enforced, in_flight_enforced, at_us (0: the server's
--       clock; else decide as of this time, for tests and replays), fleet (0|1),
--       fleet_enforced, member, ttl_us;
--       per bucket: increment_us, tolerance_us, hashed (1: field t of a client's hash);
--       per quota: sliding (0|1), limit, window_us, count_it (0|1);
--       then the permit limit if in_flight, the fleet limit if fleet.
-- Reply: now_us, refused_by (0, or the 1-based bucket/quota that refused),
--        in_flight (1 taken, 0 refused, -1 not asked), fleet (likewise), written (1 if
--        the script wrote what passed, 0 if an enforced refusal stopped it);
--        per bucket: state (1 allowed, 0 refused, -1 not evaluated), tat_us, wait_us;
--        per quota: state, remaining, reset_us, retry_us.
local out = {}
local function push(a, b, c, d)
  out[#out + 1] = a
  out[#out + 1] = b
  out[#out + 1] = c
  if d then out[#out + 1] = d end
end

local function window_retry(sliding, limit, w, elapsed, cur, prev)
  local to_end = w - elapsed
  if not sliding then return to_end end
  local room = limit - 1
  if cur <= room and prev > 0 then
    local needed = w * (1 - (room - cur) / prev)
    return math.min(math.max(math.ceil(needed) - elapsed, 0), to_end)
  end
  local needed = w * (1 - room / math.max(cur, 1))
  return to_end + math.ceil(math.max(needed, 0))
end

local nb, nq = tonumber(ARGV[1]), tonumber(ARGV[2])
local in_flight, fleet = ARGV[3] == '1', ARGV[7] == '1'
local rate_enforced, in_flight_enforced = ARGV[4] == '1', ARGV[5] == '1'
local fleet_enforced = ARGV[8] == '1'
local member, ttl = ARGV[9], tonumber(ARGV[10])
local now = tonumber(ARGV[6])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
out[1], out[2], out[3], out[4], out[5] = now, 0, -1, -1, 0
local writes = {}
local refused = 0
local a = 11
-- The clients' hashes this request reads: per key, whether it exists, its bucket's new TAT
-- and whether a permit is taken in it.
local hashes = {}
local function hash(key)
  local h = hashes[key]
  if not h then
    h = {exists = false, tat = nil, permit = false}
    hashes[key] = h
  end
  return h
end

for i = 1, nb do
  local inc, tol, hashed = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2] == '1'
  a = a + 3
  if refused == 0 then
    local tat
    if hashed then
      local t = redis.call('HGET', KEYS[i], 't')
      hash(KEYS[i]).exists = t ~= false
      tat = tonumber(t or '0') or 0
    else
      tat = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
    end
    local nxt = math.max(tat, now) + inc
    local ahead = nxt - now
    if ahead <= tol then
      push(1, nxt, 0)
      if hashed then
        hash(KEYS[i]).tat = nxt
      else
        writes[#writes + 1] = {KEYS[i], string.format('%d', nxt), string.format('%d', math.floor((nxt - now) / 1000) + 1)}
      end
    else
      push(0, tat, ahead - tol)
      refused = i
    end
  else
    push(-1, 0, 0)
  end
end

for j = 1, nq do
  local sliding, limit = ARGV[a] == '1', tonumber(ARGV[a + 1])
  local window, count_it = tonumber(ARGV[a + 2]), ARGV[a + 3] == '1'
  a = a + 4
  if refused == 0 then
    local key = KEYS[nb + j]
    local id = math.floor(now / window)
    local elapsed = now - id * window
    local cur, prev = 0, 0
    local x, y, z = string.match(redis.call('GET', key) or '', '^(%d+) (%d+) (%d+)$')
    if x then
      local seen = tonumber(x)
      if seen == id then
        cur, prev = tonumber(y), tonumber(z)
      elseif seen == id - 1 then
        prev = tonumber(y)
      end
    end
    local estimate = cur
    if sliding then estimate = prev * (1 - elapsed / window) + cur end
    local allowed = estimate + 1 <= limit + 1e-9
    local counted = allowed and count_it
    local used = estimate
    if counted then
      cur = cur + 1
      used = used + 1
      writes[#writes + 1] = {key, string.format('%d %d %d', id, cur, prev), string.format('%d', math.floor(2 * window / 1000))}
    end
    local retry = 0
    if not allowed then
      retry = window_retry(sliding, limit, window, elapsed, cur, prev)
      refused = nb + j
    end
    push(allowed and 1 or 0, math.floor(math.max(limit - used, 0)), window - elapsed, retry)
  else
    push(-1, 0, 0, 0)
  end
end

out[2] = refused
if refused ~= 0 and rate_enforced then return out end

-- Whether the fleet's set has room for one more of `max` members (taken at the end if all
-- passes). Stale members only matter when the set looks full: only then are they swept.
local function room(key, max)
  if redis.call('ZCARD', key) < max then return true end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - ttl))
  return redis.call('ZCARD', key) < max
end

-- Whether the client's hash has room for one more of `max` permits (field `t` is not one).
-- Likewise, stale permits are swept only when it looks full.
local function client_room(key, max)
  local n = redis.call('HLEN', key)
  hash(key).exists = n > 0
  if n > 0 then n = n - 1 end
  if n < max then return true end
  local fields = redis.call('HGETALL', key)
  local stale = {}
  for j = 1, #fields, 2 do
    if fields[j] ~= 't' and (tonumber(fields[j + 1]) or 0) <= now - ttl then
      stale[#stale + 1] = fields[j]
      if #stale == 1000 then
        redis.call('HDEL', key, unpack(stale))
        n = n - #stale
        stale = {}
      end
    end
  end
  if #stale > 0 then
    redis.call('HDEL', key, unpack(stale))
    n = n - #stale
  end
  return n < max
end

local k = nb + nq
local client, fleet_key = nil, nil
if in_flight then
  k = k + 1
  if client_room(KEYS[k], tonumber(ARGV[a])) then
    out[3] = 1
    client = KEYS[k]
  else
    out[3] = 0
    if in_flight_enforced then return out end
  end
  a = a + 1
end
if fleet then
  k = k + 1
  if room(KEYS[k], tonumber(ARGV[a])) then
    out[4] = 1
    fleet_key = KEYS[k]
  else
    out[4] = 0
    if fleet_enforced then return out end
  end
end

out[5] = 1
if refused == 0 then
  for _, w in ipairs(writes) do redis.call('SET', w[1], w[2], 'PX', w[3]) end
end
local at = string.format('%d', now)
if client then hash(client).permit = true end
-- Each client's hash in one HSET: its bucket's TAT (when every bucket and quota passed) and its
-- permit. It lives until its bucket would be full again and past its newest permit's TTL,
-- never less than it had. Numbers go to Redis as strings (Lua's own conversion is slower).
for key, h in pairs(hashes) do
  local tat = refused == 0 and h.tat
  if tat or h.permit then
    local keep = 0
    if tat then
      keep = math.floor((tat - now) / 1000) + 1
      if h.permit then
        redis.call('HSET', key, 't', string.format('%d', tat), member, at)
      else
        redis.call('HSET', key, 't', string.format('%d', tat))
      end
    elseif h.exists then
      redis.call('HSET', key, member, at)
    else
      redis.call('HSET', key, 't', '0', member, at)
    end
    if h.permit then keep = math.max(keep, math.floor(ttl / 1000) + 1) end
    if h.exists then
      redis.call('PEXPIRE', key, string.format('%d', keep), 'GT')
    else
      redis.call('PEXPIRE', key, string.format('%d', keep))
    end
  end
end
-- The fleet's set is one key, deleted by Redis when empty.
if fleet_key then redis.call('ZADD', fleet_key, at, member) end
return out
