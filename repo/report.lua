-- report.lua: count contributions into their combo keys' open windows,
-- atomically, one script call for many reports of one shard (CONTRACT.md §2,
-- push path). Each report is handled on its own: one failing report (a key
-- of the wrong type) answers an error and the others still count.
--
-- KEYS[1]    stream  STREAM windows waiting to close
-- KEYS[1+j]  cur     STRING report j's combo key's newest unpublished window
-- KEYS[#KEYS] probe  never written, never touched here (Keys.Probe): it only
--                    keeps the script off a Redis Cluster slot while it
--                    moves. The script writes keys it cannot declare (the
--                    dedupe sets, a parked window), and run on the node the
--                    slot moves to (which Redis does when every declared
--                    key has moved) it made there a dedupe set the old
--                    node still held: the MIGRATE of that set then failed
--                    (BUSYKEY), and the move stopped half way, the shard's
--                    windows unpublished. A declared key that exists on
--                    neither node makes Redis refuse the script on both
--                    (TRYAGAIN, UNAVAILABLE to the caller) until the move
--                    ends; on a slot that is not moving it changes nothing.
-- ARGV[1]  ttl         ms a window may live (stale + margin)
-- ARGV[2]  parked      key prefix for a displaced window; it is renamed to
--                      parked .. its stream id (same hash tag as KEYS)
-- ARGV[3]  maxlen      how many windows the stream may hold: a report that
--                      would open one more fails (see "Open a new window"
--                      in run)
-- ARGV[4]  seen        key prefix of the dedupe sets (same tag): an id is
--                      added to seen .. bucket .. ':' .. sub, where bucket is
--                      Redis's TIME in seconds / ARGV[5] and sub is the id
--                      mod the number of sub-sets (computed in Go), and
--                      looked up in the previous bucket's set too: an id is
--                      remembered at least window.dedupe. The bucket comes
--                      from Redis's clock when the script runs, the one clock
--                      of all replicas, so two replicas never disagree on it.
--                      Each set also holds the member 0 (see below).
-- ARGV[5]  bucket      seconds per dedupe bucket (window.dedupe, rounded up)
-- Then 6 values per report j (1-based), from ARGV[5 + 6*(j-1) + 1]:
--   id (decimal; compared as a string: Lua numbers are doubles and ids may
--   exceed 2^53), created_at (unix ms), created_at - W, quantity, fragment
--   (display values, see push.Fragment), sub
--
-- Go computes what it can (created_at - W, the sub-set): number parsing and
-- formatting in this Lua cost as much as a Redis command, so the script
-- formats two numbers per call (the dedupe buckets) and per join only the
-- new total (two tonumber and one format). All numbers
-- compared here are positive decimals without leading zeros, so comparing
-- length, then bytes, compares their values.
--
-- The window is one string (a hash whose values pass 64 bytes would leave
-- Redis's compact encoding and cost twice the memory), fields joined by
-- \31 (unit separator; the fragment itself uses \31 between its values):
--   total quantity, at least 4 digits (leading zeros): a join that keeps
--     its width and changes nothing else rewrites only these bytes
--     (SETRANGE); a wider total rewrites the record. Four, not ten: a
--     longer record can cross a memory allocator size class
--   anchor created_at, smallest id,
--   smallest created_at ("" while it equals the anchor),
--   stream id (the window's identity; its ms part is when it opened),
--   fragment of the smallest id
-- The first four fit in the first 64 bytes (10+15+19+15 digits and four
-- separators), so a join reads only those (GETRANGE).
--
-- The stream entry has one field, k: the window key after its ":w:" (see
-- Keys.Current), which the worker parses back into the combo key.
--
-- Returns 3 values per report: status, window_id, window_quantity
--   status 0 = joined the open window, 1 = duplicate (nothing changed;
--          window_id "0", quantity 0; also while Redis refuses writes, found
--          by reads), 2 = opened (and enqueued) a window, 3 = failed
--          (window_id holds the error message, quantity Redis's clock in
--          ms when the script began: Go dates from it the deadline of the
--          report's degraded publish, degrade.lua's ARGV[7])
--   window_id is a decimal string (exact int64).
-- Or, on a replica, Redis's READONLY error reply for the whole call.

-- The reports run in one function with no upvalues: every value it needs
-- is an argument or a local of its own. Each call of the script runs this
-- chunk again, and a closure made here costs an allocation and, for each
-- outer local it captures, a search of Lua's open upvalues, and garbage to
-- collect. With the helpers as closures (report, open, lt, counted, run),
-- a call of one report took Redis 107.8k instructions, against 99.5k now
-- (-7.7%), and a report in a call of 50, 46.6k against 45.8k
-- (cmd/combo-bench/callgrind.sh). It also keeps miniredis (gopher-lua)
-- right: there a local shared by closures stops being shared once a pcall
-- unwinds an error through them (yuin/gopher-lua#448).
--
-- run counts reports first..#KEYS-2 into out (3 values each). Until report
-- j answers, out[3j - 1] holds the dedupe set it added its id to, if it
-- did: the loop at the end needs it when report j fails.
local function run(first, out, seen, seen1, bucket, bucketSec)
  -- Globals as locals: a global is a table lookup at every use, a local a
  -- register.
  local KEYS, ARGV, call, tonumber, match, format = KEYS, ARGV, redis.call, tonumber, string.match, string.format
  local expireAt, maxLen -- formatted, parsed at first need
  for j = first, #KEYS - 2 do
    local cur, base = KEYS[1 + j], 5 + 6 * (j - 1)
    local id, sub = ARGV[base + 1], ARGV[base + 6]
    local set = seen .. sub
    local status, wid, qty
    repeat -- a block to break out of, once the report's answer is known
      -- '0' is no id (ids are > 0): it is in every set from its start, so
      -- SADD answers 2 only when it created the set, the one time it needs
      -- its expiry (a call saved on every other report).
      local added = call('SADD', set, id, '0')
      if added == 0 then status, wid, qty = 1, '0', 0; break end
      out[3 * j - 1] = set
      if added == 2 then
        -- Ids of this bucket are looked up until the next one ends, and
        -- never after: the set goes then. Lookups and expiry both run on
        -- this node's clock, so no set is read once it has expired; 2 s
        -- more for the embedded Redis, which counts TTLs down once a
        -- second and so expires a key up to a second early.
        expireAt = expireAt or format('%d', (bucket + 2) * bucketSec + 2)
        call('EXPIREAT', set, expireAt)
      end
      if call('SISMEMBER', seen1 .. sub, id) == 1 then
        -- Counted in the previous bucket. Leaving it in this one too is harmless.
        status, wid, qty = 1, '0', 0; break
      end

      local created, cw, quantity, frag = ARGV[base + 2], ARGV[base + 3], ARGV[base + 4], ARGV[base + 5]
      local head = call('GETRANGE', cur, '0', '63')
      if head ~= '' then
        local q, a, i, c = match(head, '^(%d+)\31(%d+)\31(%d+)\31(%d*)\31')
        local total = tonumber(q) + tonumber(quantity)
        -- Comparisons by length, then bytes (see above), written out: a Lua
        -- function call per comparison was 2% of a report.
        if (#cw < #a or (#cw == #a and cw < a)) and total <= 2147483647 then
          local qs = format('%04d', total)
          local m = c ~= '' and c or a -- the window's smallest created_at
          if #qs == #q and (#id > #i or (#id == #i and id >= i)) and (#created > #m or (#created == #m and created >= m)) then
            -- The common join: only the total changes.
            call('SETRANGE', cur, '0', qs)
            status, wid, qty = 0, i, total; break
          end
          -- A wider total, a smaller id or an earlier created_at: rewrite
          -- the whole record.
          local v = call('GET', cur)
          local s, f = match(v, '^[^\31]*\31[^\31]*\31[^\31]*\31[^\31]*\31([^\31]*)\31(.*)$')
          if #id < #i or (#id == #i and id < i) then i, f = id, frag end
          if #created < #m or (#created == #m and created < m) then c = created end
          call('SET', cur, table.concat({qs, a, i, c, s, f}, '\31'), 'KEEPTTL')
          status, wid, qty = 0, i, total; break
        end
      end
      -- Open a new window and enqueue it. A stream that holds maxlen
      -- windows takes no more: trimming it (XADD MAXLEN) would drop entries
      -- no worker has read, windows already acknowledged that would then
      -- be neither published nor counted. The report fails instead, and Go
      -- publishes it on its own (degraded). Checked before the open window
      -- is parked: Redis does not undo a script's writes when it then
      -- fails, and a window parked for a refused report left its key with
      -- none open, so the key's next report dated within it opened one of
      -- its own instead of joining it (a second feed item for one combo).
      maxLen = maxLen or tonumber(ARGV[3])
      if call('XLEN', KEYS[1]) >= maxLen then
        error({err = 'STREAMFULL the stream holds redis.stream_maxlen (' .. ARGV[3] .. ') windows waiting to close'})
      end
      if head ~= '' then
        -- Past W for this row (or its total would overflow int32) but not
        -- flushed yet: park the open window under its own id so its stream
        -- entry still finds it, and open a new one.
        local v = call('GET', cur)
        call('RENAME', cur, ARGV[2] .. match(v, '^[^\31]*\31[^\31]*\31[^\31]*\31[^\31]*\31([^\31]*)\31'))
      end
      local sid = call('XADD', KEYS[1], '*', 'k', match(cur, ':w:(.*)$'))
      call('SET', cur, table.concat({format('%04d', quantity), created, id, '', sid, frag}, '\31'),
        'PX', ARGV[1])
      status, wid, qty = 2, id, tonumber(quantity)
    until true
    local o = 3 * j
    out[o - 2], out[o - 1], out[o] = status, wid, qty
  end
end

local ARGV, call = ARGV, redis.call
local bucketSec = tonumber(ARGV[5])
local now = call('TIME')
local bucket = math.floor(tonumber(now[1]) / bucketSec)
local seen = ARGV[4] .. string.format('%d', bucket) .. ':'
local seen1 = ARGV[4] .. string.format('%d', bucket - 1) .. ':'
local out, n = {}, #KEYS - 2

-- Reports run one after another inside one pcall, not one pcall each
-- (that costs as much as a Redis command per report): when report j fails,
-- it alone is answered (with the error, or as a duplicate when its SADD
-- failed on an id counted before) and the loop resumes after it.
local at = 1
while at <= n do
  local ok, err = pcall(run, at, out, seen, seen1, bucket, bucketSec)
  if ok then break end
  if type(err) == 'table' then err = err.err or err.message end
  -- A replica (a demoted master, reached through a name that now points at
  -- the new one) fails the whole call with Redis's own READONLY reply.
  -- Answered as a report's failure, it reached go-redis as data, so the
  -- connection was never dropped and the report path stayed on the old
  -- master for good; and the lookup below found in its stale dedupe sets
  -- an id the new master never had, answering a retry duplicate. Each
  -- report's first command is a write, so none before this one counted.
  if string.find(tostring(err), '^READONLY') then return redis.error_reply(tostring(err)) end
  while out[3 * at - 2] ~= nil do at = at + 1 end -- the first unanswered: it failed
  local o, base = 3 * at, 5 + 6 * (at - 1)
  local id, sub = ARGV[base + 1], ARGV[base + 6]
  local marked = out[o - 1]
  -- Counted before? Found by reads alone: when Redis refuses writes (OOM,
  -- MISCONF, NOREPLICAS) the SADD fails before it can answer that, yet a
  -- duplicate changes nothing and must be answered as one, not published
  -- again on its own.
  local counted = false
  if not marked then
    for _, prefix in ipairs({seen, seen1}) do
      local found, member = pcall(call, 'SISMEMBER', prefix .. sub, id)
      if found and member == 1 then counted = true; break end
    end
  end
  if counted then
    out[o - 2], out[o - 1], out[o] = 1, '0', 0
  else
    -- Not counted: forget its id, so a retry counts it.
    if marked then pcall(call, 'SREM', marked, id) end
    out[o - 2], out[o - 1], out[o] = 3, tostring(err), tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  end
  at = at + 1
end
return out
