-- report.lua: count one contribution into its combo key's open window,
-- atomically, in one round trip (CONTRACT.md §2, push path).
--
-- KEYS[1]  cur     HASH   the combo key's newest unpublished window
-- KEYS[2]  seen    STRING this contribution id's dedupe marker
-- KEYS[3]  stream  STREAM windows waiting to close
-- ARGV[1]  id          contribution id, decimal (compared as a string:
--                      Lua numbers are doubles and ids may exceed 2^53)
-- ARGV[2]  created_at  unix ms
-- ARGV[3]  quantity
-- ARGV[4]  fragment    the row's display members as JSON (see push.Fragment)
-- ARGV[5]  W           window size, ms
-- ARGV[6]  grace       ms waited after W before the flush
-- ARGV[7]  dedupe      ms an id is remembered
-- ARGV[8]  ttl         ms a window's hash may live (stale + margin)
-- ARGV[9]  parked      key prefix for a displaced window (same hash tag);
--                      the window is renamed to parked .. its stream id
-- ARGV[10] maxlen      stream MAXLEN ~ safety bound
-- ARGV[11] activity_id, ARGV[12] user_id, ARGV[13] item_type: stream entry fields
--
-- Window hash fields: s = stream entry id (the window's identity),
-- a = anchor created_at, d = due (Redis ms), q = total quantity,
-- i = smallest id, c = smallest created_at, f = fragment of the smallest id.
--
-- Returns {status, window_id, window_quantity}:
--   status 0 = joined the open window, 1 = duplicate (nothing changed),
--          2 = opened a new window (and enqueued it)
--   window_id is a decimal string (exact int64); on a duplicate whose
--   window has closed it is "0" with quantity 0.

local function lt(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

local seen = redis.call('GET', KEYS[2])
if seen then
  local w = redis.call('HMGET', KEYS[1], 's', 'i', 'q')
  if w[1] == seen then return {1, w[2], tonumber(w[3])} end
  return {1, '0', 0}
end

local id, ca, qty = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local w = redis.call('HMGET', KEYS[1], 's', 'a', 'q', 'i', 'c')
local sid = w[1]
if sid and ca < tonumber(w[2]) + tonumber(ARGV[5]) and tonumber(w[3]) + qty <= 2147483647 then
  local total = redis.call('HINCRBY', KEYS[1], 'q', qty)
  local minid = w[4]
  if lt(id, minid) then
    redis.call('HSET', KEYS[1], 'i', id, 'f', ARGV[4])
    minid = id
  end
  if ca < tonumber(w[5]) then redis.call('HSET', KEYS[1], 'c', ARGV[2]) end
  redis.call('SET', KEYS[2], sid, 'PX', ARGV[7])
  return {0, minid, total}
end

if sid then
  -- The open window is past W for this row but not flushed yet: park it
  -- under its own id so its stream entry still finds it.
  redis.call('RENAME', KEYS[1], ARGV[9] .. sid)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = string.format('%d', now + tonumber(ARGV[5]) + tonumber(ARGV[6]))
sid = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[10], '*',
  'a', ARGV[11], 'u', ARGV[12], 't', ARGV[13], 'd', due)
redis.call('HSET', KEYS[1], 's', sid, 'a', ARGV[2], 'd', due, 'q', qty,
  'i', id, 'c', ARGV[2], 'f', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[8])
redis.call('SET', KEYS[2], sid, 'PX', ARGV[7])
return {2, id, qty}
