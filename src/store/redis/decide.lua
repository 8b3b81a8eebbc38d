-- brownout: one request's per-key operations in one atomic step on the Redis server's clock,
-- in the order asked, whatever limiters asked them: GCRA buckets, window counters and counted
-- slots, grouped by limiter. The arithmetic is that of src/math/gcra.rs and
-- src/math/window.rs. A refusal stops its group, and nothing of the group is written; an
-- enforced group's refusal stops the script with nothing written at all (a refused request
-- takes nothing); a refusal in dark mode goes on to the next group. Writes wait until every
-- group is decided. Times are whole µs, written with '%d'.
--
-- A bucket's state is 'tat:step:tolerance' (µs; a bare TAT is a state from before the step
-- was kept): a bucket of another step or tolerance (a live change, another plan, the elastic
-- bucket) carries it first, keeping what the client owes in credits, capped at a full bucket
-- (carry in src/math/gcra.rs; the scaling is a double's, within a µs). A carried state is
-- written back even when the request is refused (it charges nothing, it restates the debt),
-- so that from the first request after a change the debt runs down at the new rate.
--
-- A client's own bucket and its slots share one hash (`{client}:client`): field `t` is the
-- bucket's state (0: full; present whenever the hash is), every other field a slot, valued
-- when it was taken. So a request reads the pair with HGET and HLEN and writes both with one
-- HSET. Slots older than the TTL (their server died) are swept when the client looks full;
-- the hash expires once both its bucket would be full again and its newest slot is past the
-- TTL (an expiry is only ever moved later). A pool's slots (the fleet's) are members of one
-- sorted set scored by when they were taken, swept the same way; a key's slots in a table of
-- their own likewise, in a set that expires with its newest member.
--
-- A sliding log (src/math/log.rs): a sorted set of event times, each named by its request's
-- member; read, it drops events out of the window and beyond the newest `limit`.
--
-- KEYS: one per operation.
-- ARGV: at_us (0: the server's clock; else decide as of this time, for tests and replays),
--       member, ttl_us, groups;
--       per group: enforced (0|1), operations;
--       per operation a letter and its arguments:
--         'h' | 'b', increment_us, tolerance_us, step_us
--                                                 a bucket (in the client's hash | its own key)
--         'w', sliding, limit, window_us, count   a window (counted if count is 1)
--         'l', sliding, limit, window_us, count   a sliding log (likewise; `sliding` unread)
--         'p' | 'z' | 's', max                    a slot (client's hash | pool | own set)
-- Reply: now_us, written (1 if the script wrote what passed, 0 if an enforced refusal
--        stopped it); then per group reached: its state (1 passed, 0 refused), then per
--        operation its state (1 passed, 0 refused, -1 not evaluated: nothing follows) and,
--        when evaluated, a bucket's tat_us and wait_us, or a window's remaining, reset_us and
--        retry_us (a slot has its state only). The reply ends at an enforced refusal's group:
--        the groups after it are not reached.
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

-- A bucket's TAT as a bucket of `step` and `tol` reads it, and whether it was carried.
local function read_bucket(v, now, step, tol)
  if not v then return 0, false end
  local tat, s, o = string.match(v, '^(%d+):(%d+):(%d+)$')
  if not tat then return tonumber(v) or 0, false end
  tat, s, o = tonumber(tat), tonumber(s), tonumber(o)
  if (s == step and o == tol) or tat <= now then return tat, false end
  local owed = tat - now
  if s ~= step and s > 0 and step > 0 then owed = math.floor(owed * (step / s)) end
  return now + math.min(owed, tol), true
end

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local member, ttl, ngroups = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {now, 0}
local n = 2
local sizes, enforced = {}, {}
local a = 5
for g = 1, ngroups do
  enforced[g], sizes[g] = ARGV[a] == '1', tonumber(ARGV[a + 1])
  a = a + 2
end

-- The clients' hashes this request reads: per key, whether it exists, its bucket's new TAT
-- and whether a slot is taken in it.
local hashes = {}
local function hash(key)
  local h = hashes[key]
  if not h then
    h = {exists = false, tat = nil, slot = false}
    hashes[key] = h
  end
  return h
end

-- Whether a sorted set has room for one more of `max` members (taken at the end if all
-- passes). Stale members only matter when the set looks full: only then are they swept.
local function room(key, max)
  if redis.call('ZCARD', key) < max then return true end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - ttl))
  return redis.call('ZCARD', key) < max
end

-- Whether the client's hash has room for one more of `max` slots (field `t` is not one).
-- Likewise, stale slots are swept only when it looks full.
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

-- What the groups that passed write, once every group is decided: {what, key, ...}; a
-- group's own are dropped again when it refuses.
local writes = {}
local i = 0
for g = 1, ngroups do
  local passed = true
  local mark = #writes
  n = n + 1
  local state = n
  for _ = 1, sizes[g] do
    i = i + 1
    local kind, key = ARGV[a], KEYS[i]
    if not passed then
      n = n + 1
      out[n] = -1
    end
    if kind == 'h' or kind == 'b' then
      local inc, tol, step = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
      a = a + 4
      if passed then
        local tat, carried
        if kind == 'h' then
          local t = redis.call('HGET', key, 't')
          hash(key).exists = t ~= false
          tat, carried = read_bucket(t or nil, now, step, tol)
        else
          tat, carried = read_bucket(redis.call('GET', key) or nil, now, step, tol)
        end
        local nxt = math.max(tat, now) + inc
        local ahead = nxt - now
        if ahead <= tol then
          out[n + 1], out[n + 2], out[n + 3] = 1, nxt, 0
          n = n + 3
          local state = string.format('%d:%d:%d', nxt, step, tol)
          if kind == 'h' then
            writes[#writes + 1] = {'tat', key, nxt, state}
          else
            writes[#writes + 1] = {'set', key, state, string.format('%d', math.floor((nxt - now) / 1000) + 1)}
          end
        else
          out[n + 1], out[n + 2], out[n + 3] = 0, tat, ahead - tol
          n = n + 3
          passed = false
          if carried then
            -- Refused, but what it owes is kept as this bucket reads it: from here on it runs
            -- down at this bucket's rate (the key exists: its state was read).
            local state = string.format('%d:%d:%d', tat, step, tol)
            local keep = string.format('%d', math.floor((tat - now) / 1000) + 1)
            if kind == 'h' then
              redis.call('HSET', key, 't', state)
              redis.call('PEXPIRE', key, keep, 'GT')
            else
              redis.call('SET', key, state, 'PX', keep)
            end
          end
        end
      end
    elseif kind == 'w' then
      local sliding, limit = ARGV[a + 1] == '1', tonumber(ARGV[a + 2])
      local window, count_it = tonumber(ARGV[a + 3]), ARGV[a + 4] == '1'
      a = a + 5
      if passed then
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
        -- Counts above the limit (it was lowered live) read as the limit (WindowRule::hit).
        cur, prev = math.min(cur, limit), math.min(prev, limit)
        local estimate = cur
        if sliding then estimate = prev * (1 - elapsed / window) + cur end
        local allowed = estimate + 1 <= limit + 1e-9
        local used = estimate
        if allowed and count_it then
          cur = cur + 1
          used = used + 1
          writes[#writes + 1] = {'set', key, string.format('%d %d %d', id, cur, prev), string.format('%d', math.floor(2 * window / 1000))}
        end
        local retry = 0
        if not allowed then
          retry = window_retry(sliding, limit, window, elapsed, cur, prev)
          passed = false
        end
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = allowed and 1 or 0, math.floor(math.max(limit - used, 0)), window - elapsed, retry
        n = n + 4
      end
    elseif kind == 'l' then
      local limit, window, count_it = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), ARGV[a + 4] == '1'
      a = a + 5
      if passed then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
        local len = redis.call('ZCARD', key)
        if len > limit then
          redis.call('ZREMRANGEBYRANK', key, 0, len - limit - 1)
          len = limit
        end
        local allowed = len < limit
        local kept, retry, reset = len, 0, 0
        if allowed and count_it then
          kept = len + 1
          writes[#writes + 1] = {'log', key, string.format('%d', math.floor(window / 1000) + 1)}
        elseif not allowed then
          -- Fewer than `limit` remain once the oldest of the last `limit` leaves.
          retry = math.max(tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]) + window - now, 0)
          passed = false
        end
        if len > 0 then
          reset = math.max(tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]) + window - now, 0)
        elseif kept > 0 then
          reset = window
        end
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = allowed and 1 or 0, limit - kept, reset, retry
        n = n + 4
      end
    else
      local max = tonumber(ARGV[a + 1])
      a = a + 2
      if passed then
        local free
        if kind == 'p' then free = client_room(key, max) else free = room(key, max) end
        n = n + 1
        if free then
          out[n] = 1
          writes[#writes + 1] = {kind, key}
        else
          out[n] = 0
          passed = false
        end
      end
    end
  end
  out[state] = passed and 1 or 0
  if not passed then
    -- Nothing is written: the groups after it are not reached.
    if enforced[g] then return out end
    for k = #writes, mark + 1, -1 do writes[k] = nil end
  end
end

out[2] = 1
local at = string.format('%d', now)
for _, w in ipairs(writes) do
  local what, key = w[1], w[2]
  if what == 'set' then
    redis.call('SET', key, w[3], 'PX', w[4])
  elseif what == 'tat' then
    hash(key).tat, hash(key).state = w[3], w[4]
  elseif what == 'p' then
    hash(key).slot = true
  elseif what == 'z' then
    redis.call('ZADD', key, at, member)
  elseif what == 'log' then
    redis.call('ZADD', key, at, member)
    redis.call('PEXPIRE', key, w[3])
  else
    redis.call('ZADD', key, at, member)
    redis.call('PEXPIRE', key, string.format('%d', math.floor(ttl / 1000) + 1))
  end
end
-- Each client's hash in one HSET: its bucket's TAT (when its group passed) and its slot. It
-- lives until its bucket would be full again and past its newest slot's TTL, never less than
-- it had. Numbers go to Redis as strings (Lua's own conversion is slower).
for key, h in pairs(hashes) do
  local tat = h.tat
  if tat or h.slot then
    local keep = 0
    if tat then
      keep = math.floor((tat - now) / 1000) + 1
      if h.slot then
        redis.call('HSET', key, 't', h.state, member, at)
      else
        redis.call('HSET', key, 't', h.state)
      end
    elseif h.exists then
      redis.call('HSET', key, member, at)
    else
      redis.call('HSET', key, 't', '0', member, at)
    end
    if h.slot then keep = math.max(keep, math.floor(ttl / 1000) + 1) end
    if h.exists then
      redis.call('PEXPIRE', key, string.format('%d', keep), 'GT')
    else
      redis.call('PEXPIRE', key, string.format('%d', keep))
    end
  end
end
return out
