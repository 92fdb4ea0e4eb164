-- flush.lua: publish one window's merged record, exactly once, and retire it.
-- Reading the window, deleting it, XACK+XDEL of its entry and PUBLISH, in
-- that order, happen in one atomic step: a report can never land between
-- the read and the delete, a crash can never leave a window published but
-- still pending, and a refused write stops the script before it publishes.
--
-- KEYS[1]  stream  STREAM windows waiting to close
-- KEYS[2]  cur     STRING the combo key's newest unpublished window
-- KEYS[3]  parked  STRING where the window is if a newer one displaced it
-- ARGV[1]  group        consumer group
-- ARGV[2]  entry id     the window's identity; its ms part is when the
--                       window opened, by Redis's clock
-- ARGV[3]  channel      act:{activity_id}:contributions
-- ARGV[4]  activity_id  decimal
-- ARGV[5]  user_id      decimal
-- ARGV[6]  item_type    as a JSON string literal
-- ARGV[7]  delay        W + grace + 1, ms: the window is due at open +
--                       delay (open is floored to the ms; the extra ms
--                       keeps a push with grace 0 from coming early)
-- ARGV[8]  stale        ms after opening past which the window is dropped
-- ARGV[9]  mode         "" (or absent): flush; "retire": retire the window only if
--                       it is done with (stale, gone or lost, as below),
--                       never publish it, and otherwise change nothing
--                       (status 5). The worker retires so a window whose
--                       flush keeps failing in Go (a panic) once it is stale.
-- ARGV[10] not after    absent or 0: no bound; else Redis ms past which
--                       this flush was sent too long ago to run: its
--                       sender stopped waiting for the answer by then. It
--                       answers late (status 6) and changes nothing. A
--                       paused master (SIGSTOP, a VM stall) runs the
--                       commands that waited on its sockets when it
--                       resumes, before it hears that the cluster promoted
--                       its replica meanwhile: such a flush found the
--                       window in the old master's copy of the data, which
--                       the new master had already published, and pushed
--                       it a second time (PUBLISH reaches the whole
--                       cluster).
-- ARGV[11] expired      ms after its opening from which a window's data
--                       may have expired: its TTL (report.lua's ARGV[1]),
--                       less how early this Redis may expire a key (the
--                       embedded one counts TTLs down a tick at a time)
--                       and how far its id may run ahead of the clock
--                       that started the TTL (repo.IDsAhead).
--                       Data missing before then was evicted or deleted
--                       (lost), even when the flush comes after
--                       window.stale
--
-- Window value: see report.lua.
--
-- Returns {status, a, b}, three integers, or for status 0 four:
--   0 published  a = lag ms past due, b = quantity, and the number of
--                clients the PUBLISH reached on this node (subscribers
--                of the channel or of a pattern matching it)
--   1 early      a = due ms, b = now ms (Redis clock); nothing changed
--   2 stale      a = age ms, b = quantity (0 if its data had expired:
--                past ARGV[11]); dropped, acked and deleted, never published
--   3 gone       a = 0, b = 0: no window for this entry (already published,
--                e.g. by the consumer that claimed it); acked and deleted
--   4 lost       a = age ms, b = 0: the entry still waits but its data is
--                gone before it could expire (ARGV[11]), so it was never
--                published: evicted (maxmemory-policy is not noeviction),
--                deleted, or overwritten with another type; acked and
--                deleted. A flush delayed past window.stale (an outage, a
--                backlog) still tells this from an expiry
--   5 kept       a = age ms, b = 0: mode "retire" and not stale; nothing
--                changed
--   6 late       a = now ms (Redis clock), b = 0: run past ARGV[10];
--                nothing changed
-- or an error reply, nothing changed and the window still pending: NOPERM
-- when the user may not PUBLISH on the channel, BADWINDOW when the window's
-- record does not parse (below), or Redis's refusal of the script's first
-- write while it takes none (MISCONF, NOREPLICAS, READONLY: see "Retire
-- first, publish last" below).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local notAfter = tonumber(ARGV[10])
if notAfter and notAfter > 0 and now > notAfter then return {6, now, 0} end
local sid = ARGV[2]
local opened = tonumber(string.match(sid, '^(%d+)'))

local function retire()
  redis.call('XACK', KEYS[1], ARGV[1], sid)
  redis.call('XDEL', KEYS[1], sid)
end

-- A value of another type at the key (a foreign write under our prefix) is
-- no window data either: with redis.call its WRONGTYPE would fail every
-- flush and retire of the window, which would stay pending for ever,
-- retried by every replica, never dropped at window.stale.
local function load(key)
  local v = redis.pcall('GET', key)
  if not v or type(v) == 'table' then return nil end
  local q, a, i, c, s, f = string.match(v, '^(%d+)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31(.*)$')
  if s ~= sid then return nil end
  -- q has leading zeros (fixed width); as a number it prints without them.
  return {a = a, q = tonumber(q), i = i, c = (c ~= '' and c or a), f = f}
end

local key = KEYS[2]
local w = load(key)
if not w then
  key = KEYS[3]
  w = load(key)
end
if not w then
  -- No data. A publish deletes the data and the entry together, so if the
  -- entry is still in the stream nobody published the window: once its
  -- TTL may have run (ARGV[11]; the TTL was set when the window opened,
  -- in the same script as its entry), its data expired (stale); before,
  -- it was evicted or deleted (lost), however late this flush comes. If the entry is gone
  -- too, another consumer already published it.
  local waiting = #redis.call('XRANGE', KEYS[1], sid, sid) > 0
  retire()
  if not waiting then return {3, 0, 0} end
  if now - opened >= tonumber(ARGV[11]) then return {2, now - opened, 0} end
  return {4, now - opened, 0}
end

if now - opened > tonumber(ARGV[8]) then
  redis.call('DEL', key)
  retire()
  return {2, now - opened, w.q}
end

if ARGV[9] == 'retire' then return {5, now - opened, 0} end

local due = opened + tonumber(ARGV[7])
if now < due then return {1, due, now} end

-- The record's fields, parsed before anything is written: a Lua error
-- after the DEL below would leave the window deleted and never published,
-- with an error answer that says nothing changed. Only damaged data (or a
-- record layout this version did not write) fails here; the window then
-- stays pending, each flush answers this error, and window.stale drops it
-- (above), counted and logged as stale.
local star, item, nick, avatar, name, icon = string.match(w.f, '^([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31([^\31]*)\31(.*)$')
if not icon then
  return redis.error_reply('BADWINDOW the record of window ' .. sid .. ' at ' .. key ..
    ' does not parse; the window stays pending until window.stale drops it')
end

-- Retire first, publish last. Redis decides whether a script may write
-- (MISCONF after a failed save, NOREPLICAS, READONLY on a demoted master) at
-- its first write, not at its start, and PUBLISH is not a write: published
-- first, a refused DEL would leave the window pending and every retry would
-- publish it again. Once a script has written, those checks pass for the
-- rest of it, so PUBLISH can then fail only on an ACL that denies the
-- channel, after the window is retired. That is checked first, so such a
-- flush changes nothing: the window stays pending, retried until the
-- channel is granted or it is stale. (Redis 7 gives a new ACL user no
-- channel, acl-pubsub-default resetchannels: every window would be lost.
-- redis.acl_check_cmd is Redis 7's; the embedded Redis has no ACLs.)
if redis.acl_check_cmd and not redis.acl_check_cmd('PUBLISH', ARGV[3], '') then
  return redis.error_reply('NOPERM this Redis user may not PUBLISH on ' .. ARGV[3] ..
    ' (it needs the command and the channels: ACL SETUSER <user> +publish &act:*); the window stays pending')
end
redis.call('DEL', key)
retire()
local heard = redis.call('PUBLISH', ARGV[3], table.concat({
  '{"activity_id":', ARGV[4], ',"type":"contributions_response","record":{"id":', w.i,
  ',"user_id":', ARGV[5], ',"nickname":"', nick, '","avatar_url":"', avatar,
  '","star_id":', star, ',"item_id":', item, ',"item_type":', ARGV[6],
  ',"item_name":"', name, '","item_icon":"', icon, '"',
  ',"quantity":', w.q, ',"combo_count":', w.q, ',"created_at":', w.c, '}}'}))
return {0, now - due, w.q, heard}
