-- report.lua: count contributions into their combo keys' open windows,
-- atomically, one script call for many reports of one shard (CONTRACT.md §2,
-- push path). Each report is handled on its own: one failing report (a key
-- of the wrong type) answers an error and the others still count.
--
-- KEYS[1]    stream  STREAM windows waiting to close
-- KEYS[1+j]  cur     STRING report j's combo key's newest unpublished window
-- ARGV[1]  W           window size, ms
-- ARGV[2]  bucket      ms per dedupe bucket (window.dedupe / 2)
-- ARGV[3]  ttl         ms a window may live (stale + margin)
-- ARGV[4]  parked      key prefix for a displaced window; it is renamed to
--                      parked .. its stream id (same hash tag as KEYS)
-- ARGV[5]  seen        key prefix of dedupe sets: seen .. bucket .. ':' .. sub
--                      (same tag). An id is added to a SET of the current
--                      bucket (Redis TIME / bucket ms), the one of its sub
--                      (id mod the number of sub-sets, computed in Go), and
--                      looked up in the current and the 2 previous buckets,
--                      so it is remembered for at least window.dedupe.
--                      Spreading a bucket over many small sets keeps each
--                      in Redis's intset encoding (about 10 bytes an id
--                      instead of 80) and makes each expiry cheap: one big
--                      set would be freed on Redis's main thread at once.
-- ARGV[6]  maxlen      stream MAXLEN ~ safety bound
-- Then 8 values per report j (1-based), from ARGV[6 + 8*(j-1) + 1]:
--   id (decimal; compared as a string: Lua numbers are doubles and ids may
--   exceed 2^53), created_at (unix ms), quantity, fragment (display values,
--   see push.Fragment), activity_id, user_id, item_type (these three are
--   the stream entry's fields a, u, t), sub (the id's dedupe sub-set)
--
-- The window is one string (a hash whose values pass 64 bytes would leave
-- Redis's compact encoding and cost twice the memory), fields joined by
-- \31 (unit separator; the fragment itself uses \31 between its values):
--   stream id (the window's identity; its ms part is when it opened)
--   anchor created_at, total quantity, smallest id,
--   smallest created_at ("" while it equals the anchor), fragment of the
--   smallest id
--
-- Returns 3 values per report: status, window_id, window_quantity
--   status 0 = joined the open window, 1 = duplicate (nothing changed;
--          window_id "0", quantity 0), 2 = opened (and enqueued) a window,
--          3 = failed (window_id holds the error message)
--   window_id is a decimal string (exact int64).

local function lt(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

local W, bucketMs = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local bucket = math.floor((tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) / bucketMs)
local buckets = {}
for b = bucket - 2, bucket do buckets[#buckets + 1] = ARGV[5] .. string.format('%d', b) .. ':' end
local seenUntil = string.format('%d', (bucket + 4) * bucketMs)

local function report(j)
  local cur, base = KEYS[1 + j], 6 + 8 * (j - 1)
  local id, created, quantity, frag = ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
  local sub = ARGV[base + 8]
  for _, b in ipairs(buckets) do
    if redis.call('SISMEMBER', b .. sub, id) == 1 then return 1, '0', 0 end
  end
  local seen = buckets[3] .. sub
  local function mark()
    if redis.call('SADD', seen, id) == 1 then redis.call('PEXPIREAT', seen, seenUntil) end
  end

  local ca, qty = tonumber(created), tonumber(quantity)
  local v = redis.call('GET', cur)
  if v then
    local sid, a, q, i, c, f = string.match(v, '^([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31(.*)$')
    local total = tonumber(q) + qty
    if ca < tonumber(a) + W and total <= 2147483647 then
      if lt(id, i) then i, f = id, frag end
      if ca < tonumber(c ~= '' and c or a) then c = created end
      redis.call('SET', cur, table.concat({sid, a, total, i, c, f}, '\31'), 'KEEPTTL')
      mark()
      return 0, i, total
    end
    -- Past W for this row but not flushed yet: park the open window under
    -- its own id so its stream entry still finds it.
    redis.call('RENAME', cur, ARGV[4] .. sid)
  end

  local sid = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[6], '*',
    'a', ARGV[base + 5], 'u', ARGV[base + 6], 't', ARGV[base + 7])
  redis.call('SET', cur, table.concat({sid, created, quantity, id, '', frag}, '\31'), 'PX', ARGV[3])
  mark()
  return 2, id, qty
end

local out = {}
for j = 1, #KEYS - 1 do
  local ok, status, wid, qty = pcall(report, j)
  if not ok then
    local msg = status
    if type(msg) == 'table' then msg = msg.err or msg.message end
    status, wid, qty = 3, tostring(msg), 0
  end
  out[#out + 1] = status
  out[#out + 1] = wid
  out[#out + 1] = qty
end
return out
