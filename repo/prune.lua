-- prune.lua: remove one consumer from the group, but only if it has no
-- pending entries and has been idle at least the given time. Checked and
-- done in one step: XGROUP DELCONSUMER drops a consumer's pending entries,
-- so a consumer that took an entry after a separate check would lose it.
--
-- KEYS[1]  stream  STREAM
-- ARGV[1]  group
-- ARGV[2]  consumer name
-- ARGV[3]  minimum idle, ms
--
-- Returns 1 if the consumer was deleted, 0 if it was kept or not found.

local consumers = redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
for _, c in ipairs(consumers) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] == ARGV[2] then
    if tonumber(f['pending']) == 0 and tonumber(f['idle']) >= tonumber(ARGV[3]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
      return 1
    end
    return 0
  end
end
return 0
