-- forget.lua: delete a stopping replica's settings and its claim of its
-- consumer, and take it out of the set of replicas, unless another
-- process holds the claim now. Two processes given one worker.consumer
-- share one settings key and one claim (ClaimConsumer): the one stopping
-- after the other claimed last must not delete what that one wrote, or it
-- goes uncompared with the other replicas, and unseen as a twin, until
-- its next reading. (One that claimed last itself cannot tell from the
-- claim that a twin runs: the settings watch does not call this while its
-- claims' twin is set, until three claims in a row find none, so twins
-- stopped close together leave all of it to expire, as a killed replica
-- does.) Checked and done in one step, as a claim may land between a
-- separate check and the deletion.
--
-- KEYS[1]  the consumer's claim (Keys.ConsumerInstance)   STRING
-- KEYS[2]  the consumer's settings (Keys.ReplicaSettings) STRING
-- KEYS[3]  the set of replicas (Keys.Replicas)            SET
-- ARGV[1]  this process, as its claims name it
-- ARGV[2]  the consumer (worker.consumer)
--
-- Returns 1 if deleted (the claim was this process's, or none), 0 if
-- another process holds the claim (nothing changed).

local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', KEYS[3], ARGV[2])
return 1
