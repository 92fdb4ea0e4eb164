-- report.lua: count one contribution into its combo key's open window,
-- atomically, in one round trip (CONTRACT.md §2, push path).
--
-- KEYS[1]  cur     STRING the combo key's newest unpublished window
-- KEYS[2]  stream  STREAM windows waiting to close
-- ARGV[1]  id          contribution id, decimal (compared as a string:
--                      Lua numbers are doubles and ids may exceed 2^53)
-- ARGV[2]  created_at  unix ms
-- ARGV[3]  quantity
-- ARGV[4]  fragment    display values of the row (see push.Fragment)
-- ARGV[5]  W           window size, ms
-- ARGV[6]  bucket      ms per dedupe bucket (window.dedupe / 4)
-- ARGV[7]  ttl         ms a window may live (stale + margin)
-- ARGV[8]  parked      key prefix for a displaced window; it is renamed to
--                      parked .. its stream id (same hash tag as KEYS)
-- ARGV[9]  seen        key prefix of dedupe buckets: seen .. bucket number
--                      (same tag). An id is added to the SET of the current
--                      bucket (Redis TIME / bucket ms) and looked up in the
--                      current and the 4 previous ones, so it is remembered
--                      for at least window.dedupe. Sets of ids cost a third
--                      of a key per id; each bucket expires as a whole.
-- ARGV[10] maxlen      stream MAXLEN ~ safety bound
-- ARGV[11] activity_id, ARGV[12] user_id, ARGV[13] item_type: stream entry fields
--
-- The window is one string (a hash whose values pass 64 bytes would leave
-- Redis's compact encoding and cost twice the memory), fields joined by
-- \31 (unit separator; the fragment itself uses \31 between its values):
--   stream id (the window's identity; its ms part is when it opened)
--   anchor created_at, total quantity, smallest id,
--   smallest created_at ("" while it equals the anchor), fragment of the
--   smallest id
--
-- Returns {status, window_id, window_quantity}:
--   status 0 = joined the open window, 1 = duplicate (nothing changed;
--          window_id "0", quantity 0), 2 = opened (and enqueued) a window
--   window_id is a decimal string (exact int64).

local function lt(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

local id = ARGV[1]
local t = redis.call('TIME')
local bucket = math.floor((tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) / tonumber(ARGV[6]))
for b = bucket - 4, bucket do
  if redis.call('SISMEMBER', ARGV[9] .. string.format('%d', b), id) == 1 then return {1, '0', 0} end
end
local seen = ARGV[9] .. string.format('%d', bucket)
local function mark()
  if redis.call('SADD', seen, id) == 1 and redis.call('PTTL', seen) == -1 then
    redis.call('PEXPIRE', seen, tonumber(ARGV[6]) * 6)
  end
end

local ca, qty = tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('GET', KEYS[1])
if v then
  local sid, a, q, i, c, f = string.match(v, '^([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31(.*)$')
  local total = tonumber(q) + qty
  if ca < tonumber(a) + tonumber(ARGV[5]) and total <= 2147483647 then
    if lt(id, i) then i, f = id, ARGV[4] end
    if ca < tonumber(c ~= '' and c or a) then c = ARGV[2] end
    redis.call('SET', KEYS[1], table.concat({sid, a, total, i, c, f}, '\31'), 'KEEPTTL')
    mark()
    return {0, i, total}
  end
  -- Past W for this row but not flushed yet: park the open window under
  -- its own id so its stream entry still finds it.
  redis.call('RENAME', KEYS[1], ARGV[8] .. sid)
end

local sid = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[10], '*',
  'a', ARGV[11], 'u', ARGV[12], 't', ARGV[13])
redis.call('SET', KEYS[1], table.concat({sid, ARGV[2], ARGV[3], id, '', ARGV[4]}, '\31'), 'PX', ARGV[7])
mark()
return {2, id, qty}
