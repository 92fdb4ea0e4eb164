-- degrade.lua: publish one report on its own (degraded: the report script
-- failed for it while Redis answered, CONTRACT.md §1) and then remember its
-- id in its shard's dedupe set, as if counted, so that a retry of it
-- (its answer lost, or the caller sending it again) answers duplicate
-- instead of being published a second time. See Repo.publishSingles.
--
-- The id is added only after the PUBLISH succeeded: a report that was not
-- published must stay unknown, so that its retry publishes it. The SADD
-- may fail where the PUBLISH did not (Redis refusing writes: OOM, MISCONF,
-- NOREPLICAS): the report was published all the same, its id is not
-- remembered, and a retry of it may be published again.
--
-- KEYS[1]  probe    Keys.Probe of the report's shard: never written or read.
--                   It routes the call to the shard's node on a Redis
--                   Cluster (PUBLISH names no key) and keeps the call off
--                   a slot while it moves, as in report.lua: the dedupe set
--                   must not be made on a node the slot is moving to.
-- ARGV[1]  channel  the report's activity channel (push.Channel)
-- ARGV[2]  payload  the report as a record of its own (push.Single)
-- ARGV[3]  seen     key prefix of the shard's dedupe sets (report.lua ARGV[4])
-- ARGV[4]  bucket   seconds per dedupe bucket (report.lua ARGV[5])
-- ARGV[5]  id       the report's id (decimal)
-- ARGV[6]  sub      the id's dedupe sub-set (report.lua's per-report sub)
--
-- Returns 1 when the id is now remembered, 0 when the SADD was refused.
-- A failed PUBLISH is the script's error: nothing was written.
local call = redis.call
call('PUBLISH', ARGV[1], ARGV[2])
local bucketSec = tonumber(ARGV[4])
local bucket = math.floor(tonumber(call('TIME')[1]) / bucketSec)
local set = ARGV[3] .. string.format('%d', bucket) .. ':' .. ARGV[6]
-- '0' is in every dedupe set from its start (see report.lua): SADD answers
-- 2 only when it made the set, which then needs report.lua's expiry.
local ok, added = pcall(call, 'SADD', set, ARGV[5], '0')
if not ok then return 0 end
if added == 2 then
  call('EXPIREAT', set, string.format('%d', (bucket + 3) * bucketSec))
end
return 1
