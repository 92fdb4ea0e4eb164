-- flush.lua: publish one window's merged record, exactly once, and retire it.
-- Reading the window, PUBLISH, deleting it and XACK+XDEL of its entry happen
-- in one atomic step: a report can never land between the read and the
-- delete, and a crash can never leave a window published but still pending.
--
-- KEYS[1]  stream  STREAM windows waiting to close
-- KEYS[2]  cur     HASH   the combo key's newest unpublished window
-- KEYS[3]  parked  HASH   where the window is if a newer one displaced it
-- ARGV[1]  group        consumer group
-- ARGV[2]  entry id     the window's identity (hash field s); its ms part
--                       is when the window opened, by Redis's clock
-- ARGV[3]  channel      act:{activity_id}:contributions
-- ARGV[4]  activity_id  decimal
-- ARGV[5]  stale        ms after opening past which the window is dropped
--
-- Returns {status, a, b}:
--   0 published  a = lag ms past due, b = quantity
--   1 early      a = due ms, b = now ms (Redis clock); nothing changed
--   2 stale      a = age ms, b = quantity (0 if its data had expired
--                unpublished); dropped, acked and deleted, never published
--   3 gone       no window for this entry (already flushed, e.g. by the
--                consumer that claimed it); acked and deleted

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sid = ARGV[2]
local opened = tonumber(string.match(sid, '^(%d+)'))

local function retire()
  redis.call('XACK', KEYS[1], ARGV[1], sid)
  redis.call('XDEL', KEYS[1], sid)
end

local key = KEYS[2]
local w = redis.call('HMGET', key, 's', 'd', 'q', 'i', 'c', 'f')
if w[1] ~= sid then
  key = KEYS[3]
  w = redis.call('HMGET', key, 's', 'd', 'q', 'i', 'c', 'f')
end
if w[1] ~= sid then
  -- No data. If the entry is still in the stream, nobody published the
  -- window: its hash expired, so it is stale. If the entry is gone too,
  -- another consumer already published it.
  local expired = #redis.call('XRANGE', KEYS[1], sid, sid) > 0 and now - opened > tonumber(ARGV[5])
  retire()
  if expired then return {2, now - opened, 0} end
  return {3, 0, 0}
end

if now - opened > tonumber(ARGV[5]) then
  redis.call('DEL', key)
  retire()
  return {2, now - opened, tonumber(w[3])}
end

local due = tonumber(w[2])
if now < due then return {1, due, now} end

redis.call('PUBLISH', ARGV[3], '{"activity_id":' .. ARGV[4] ..
  ',"type":"contributions_response","record":{"id":' .. w[4] ..
  ',"quantity":' .. w[3] .. ',"combo_count":' .. w[3] ..
  ',"created_at":' .. w[5] .. ',' .. w[6] .. '}}')
redis.call('DEL', key)
retire()
return {0, now - due, tonumber(w[3])}
