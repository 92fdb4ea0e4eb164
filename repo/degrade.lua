-- degrade.lua: publish one report on its own (degraded: the report script
-- failed for it while Redis answered, CONTRACT.md §1) and remember its id
-- in its shard's dedupe set, as if counted, so that a retry of it (its
-- answer lost, or the caller sending it again) answers duplicate instead
-- of being published a second time. See Repo.publishSingles.
--
-- Published at most once, unless the node refuses writes (below): an id
-- the dedupe sets already hold is not published again. It was published
-- by this very call run before (on a Redis Cluster go-redis sends a node's
-- commands again after their answer was lost, however few retries it is
-- given), or by another copy, or it has been counted since into a window,
-- which will push it. Go answers such a report duplicate.
--
-- Remembered only if published: the id is added first, so that a refusal
-- to write is known before anything is published, and taken out again if
-- the PUBLISH fails, so that a retry publishes it. (A user not allowed the
-- channel is refused before the id is added, on Redis 7: below.) A node refusing writes for its own state (OOM, MISCONF,
-- NOREPLICAS) still publishes, without remembering: a retry of the report
-- may then be published again (README says so). Any other refusal
-- (READONLY: this is a replica, whose PUBLISH would not reach the
-- master's subscribers) is the script's error, and nothing is published.
--
-- KEYS[1]  stream   the shard's stream (Keys.Stream), never touched here
-- KEYS[2]  probe    the shard's probe key (Keys.Probe), never touched here
--          Together they route the call to the shard's master on a Redis
--          Cluster (PUBLISH names no key) and keep it off a slot while it
--          moves, as report.lua's keys do: with the stream on one node
--          and the probe on neither, both refuse it (TRYAGAIN). One key
--          alone would be redirected (ASK) to the node the slot moves to,
--          and the dedupe set made there stops the move (BUSYKEY).
-- ARGV[1]  channel  the report's activity channel (push.Channel)
-- ARGV[2]  payload  the report as a record of its own (push.Single)
-- ARGV[3]  seen     key prefix of the shard's dedupe sets (report.lua ARGV[4])
-- ARGV[4]  bucket   seconds per dedupe bucket (report.lua ARGV[5])
-- ARGV[5]  id       the report's id (decimal)
-- ARGV[6]  sub      the id's dedupe sub-set (report.lua's per-report sub)
-- ARGV[7]  not after  absent or 0: no bound; else Redis ms past which this
--          call was sent too long ago to run: its sender had stopped
--          waiting for the answer by then (and answered its caller
--          UNAVAILABLE, who may send the report again). It answers late
--          and changes nothing. A master paused (SIGSTOP, a VM stall) runs
--          the commands that waited on its sockets when it resumes, before
--          it hears that the cluster promoted its replica meanwhile: such a
--          call did not find the id in the old master's stale dedupe sets
--          (the report, sent again, was published by the new master) and
--          pushed the report a second time (PUBLISH reaches the whole
--          cluster). Go computes it from the clock report.lua answered
--          with (see Repo.publishSingles).
--
-- Returns 1: published and remembered; 0: published, not remembered (the
-- node refuses writes); 2: already remembered, not published again; 3:
-- late (run past ARGV[7]), nothing changed. Or an error reply, nothing
-- published nor remembered: NOPERM when the user may not PUBLISH on
-- ARGV[1], else Redis's refusal of the SADD (READONLY) or of the PUBLISH.
local call, id = redis.call, ARGV[5]
local bucketSec = tonumber(ARGV[4])
local t = call('TIME')
local notAfter = tonumber(ARGV[7])
if notAfter and notAfter > 0 and tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > notAfter then
  return 3
end
-- A channel denied to this Redis user is said before anything is written,
-- in the words flush.lua uses, naming the channel and the remedy: Redis's
-- own error names neither. (redis.acl_check_cmd is Redis 7's; the embedded
-- Redis has no ACLs.)
if redis.acl_check_cmd and not redis.acl_check_cmd('PUBLISH', ARGV[1], '') then
  return redis.error_reply('NOPERM this Redis user may not PUBLISH on ' .. ARGV[1] ..
    ' (it needs the command and the channels: ACL SETUSER <user> +publish &act:*); the report is not published')
end
local bucket = math.floor(tonumber(t[1]) / bucketSec)
local set = ARGV[3] .. string.format('%d', bucket) .. ':' .. ARGV[6]
local prev = ARGV[3] .. string.format('%d', bucket - 1) .. ':' .. ARGV[6]

-- An error from pcall is a string on Redis 7.0 and miniredis, a table on
-- some versions (as in report.lua).
local function message(err)
  if type(err) == 'table' then return err.err or err.message or tostring(err) end
  return tostring(err)
end

-- The write first, the lookups after: on a replica (a demoted master whose
-- dedupe sets are stale) a lookup found ids the new master never had, and
-- answered 2, a duplicate, for a report published nowhere. '0' is in every
-- dedupe set from its start (see report.lua): SADD answers 0 when the id
-- was in the set already, 2 only when it made the set, which then needs
-- report.lua's expiry.
local remembered, added = pcall(call, 'SADD', set, id, '0')
if remembered then
  if added == 2 then
    call('EXPIREAT', set, string.format('%d', (bucket + 2) * bucketSec + 2)) -- as report.lua
  end
  -- Remembered before, in this bucket or the last (left in this one too:
  -- harmless, as in report.lua).
  if added == 0 or call('SISMEMBER', prev, id) == 1 then
    return 2
  end
else
  local err = message(added)
  if not (err:find('^OOM') or err:find('^MISCONF') or err:find('^NOREPLICAS')) then
    return redis.error_reply(err)
  end
  -- Refusing writes for its own state, the node still answers reads.
  if call('SISMEMBER', set, id) == 1 or call('SISMEMBER', prev, id) == 1 then
    return 2
  end
end
local published, err = pcall(call, 'PUBLISH', ARGV[1], ARGV[2])
if not published then
  if remembered then call('SREM', set, id) end
  return redis.error_reply(message(err))
end
if remembered then return 1 end
return 0
