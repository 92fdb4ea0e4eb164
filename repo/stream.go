package repo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// EnsureGroups creates the consumer group on every shard's stream (see
// EnsureGroup). A shard that fails does not stop the others; the error
// joins every shard's.
func (r *Repo) EnsureGroups(ctx context.Context) error {
	var errs []error
	for shard := 0; shard < r.keys.Shards(); shard++ {
		errs = append(errs, r.EnsureGroup(ctx, shard))
	}
	return errors.Join(errs...)
}

// EnsureGroup creates the consumer group on shard's stream (and the stream
// itself); an existing group is left as it is. The group starts at "0" so
// entries added before the first worker ever ran are not skipped.
//
// XGROUP CREATE is a write, refused even when the group exists by a Redis
// that refuses writes for memory (OOM under noeviction). Reading and
// flushing still work there, and flushing frees memory, so a worker must
// not wait for the write: when Redis answers with an error, a read (XINFO
// GROUPS) tells whether the group is there already, or that the stream
// itself is missing (ErrNoStream).
func (r *Repo) EnsureGroup(ctx context.Context, shard int) error {
	stream := r.keys.Stream(shard)
	err := r.rdb.XGroupCreateMkStream(ctx, stream, Group, "0").Err()
	if err == nil || redis.HasErrorPrefix(err, "BUSYGROUP") {
		return nil
	}
	if !isUnavailable(err) {
		groups, gerr := r.rdb.XInfoGroups(ctx, stream).Result()
		if gerr == nil && slices.ContainsFunc(groups, func(g redis.XInfoGroup) bool { return g.Name == Group }) {
			return nil
		}
		// HasErrorPrefix drops the reply's "ERR " before comparing.
		if gerr != nil && redis.HasErrorPrefix(gerr, "no such key") {
			err = fmt.Errorf("%w (%w)", ErrNoStream, err)
		}
	}
	return wrap("repo.EnsureGroup", fmt.Errorf("shard %d: %w", shard, err))
}

// moved reports whether shard's group, found missing by consumer's read or
// claim and ensured since, holds consumer already: then the stream was not
// lost but moved, with its group, its consumers and their pending entries,
// to another master by a Redis Cluster reshard (MIGRATE deletes it on the
// old master, answering a read blocked there "UNBLOCKED the stream key no
// longer exists"). A group Redis lost and that was created again, by this
// replica or another, has no consumer that read or claimed before the
// loss. When Redis does not answer, it is taken as lost, the loss counted
// as before this check.
func (r *Repo) moved(ctx context.Context, shard int, consumer string) bool {
	cs, err := r.rdb.XInfoConsumers(ctx, r.keys.Stream(shard), Group).Result()
	return err == nil && slices.ContainsFunc(cs, func(c redis.XInfoConsumer) bool { return c.Name == consumer })
}

// ErrGroupRecreated is Read's and Claim's error when shard's consumer
// group was missing (NOGROUP, or a blocked read's stream deleted under
// it) and has just been created again: Redis lost the stream, and with it
// every window waiting in it and its pending entries (FLUSHALL, DEL, a
// restart without persistence, eviction under a maxmemory-policy other
// than noeviction). Nothing was read; the next read works. Those windows can no longer be told from ones published
// elsewhere (their flushes answer Gone), so this is the one sign of the loss.
var ErrGroupRecreated = errors.New("consumer group was missing and has been created again: Redis lost the stream and the windows waiting in it")

// ErrNoGroup is PendingIDs' error for a stream or consumer group that is
// missing: nothing was created, unlike Read's ErrGroupRecreated.
var ErrNoGroup = errors.New("consumer group missing")

// unblockedStreamDeleted is Redis's reply to an XREADGROUP blocked on a
// stream that was deleted meanwhile (FLUSHALL, DEL).
const unblockedStreamDeleted = "UNBLOCKED the stream key no longer exists"

// Read reads up to count entries of shard's stream for consumer. start "0"
// re-reads the consumer's own pending entries (after a restart), ">" reads
// new ones, waiting up to block (block must be > 0 or < 0 for no wait: 0
// would wait forever). Entries that cannot be parsed come back as bad
// entries, each with why, for the caller to log and Drop. Own pending entries deleted from the stream
// before their windows were published (by hand, or trimmed) come back as
// deleted ids, as Claim's: their windows cannot be published. Unlike
// XAUTOCLAIM, XREADGROUP leaves them pending, so the caller Drops them too.
func (r *Repo) Read(ctx context.Context, shard int, consumer, start string, count int, block time.Duration) (ws []Window, bad []BadEntry, deleted []string, err error) {
	if block == 0 {
		return nil, nil, nil, errors.New("repo.Read: block 0 would wait forever")
	}
	res, err := r.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: Group, Consumer: consumer, Streams: []string{r.keys.Stream(shard), start},
		Count: int64(count), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil, nil, nil
	}
	if err != nil {
		// A read blocked on the stream when it is deleted (FLUSHALL, DEL)
		// is answered "UNBLOCKED the stream key no longer exists": the
		// group went with it, the same loss as NOGROUP, not a failure of
		// Redis's. (Other UNBLOCKED replies, such as CLIENT UNBLOCK's,
		// remain errors.)
		if redis.HasErrorPrefix(err, "NOGROUP") || redis.HasErrorPrefix(err, unblockedStreamDeleted) {
			// The stream or group vanished (FLUSHALL, a failover that lost
			// it): recreate it and read again next time.
			if gerr := r.EnsureGroup(ctx, shard); gerr != nil {
				return nil, nil, nil, gerr
			}
			if r.moved(ctx, shard, consumer) {
				return nil, nil, nil, nil
			}
			return nil, nil, nil, fmt.Errorf("repo.Read: shard %d: %w (%w)", shard, ErrGroupRecreated, err)
		}
		return nil, nil, nil, wrap("repo.Read", err)
	}
	for _, s := range res {
		for _, m := range s.Messages {
			// A pending entry no longer in the stream is answered with its
			// id and no fields at all; every entry added has at least one.
			if m.Values == nil {
				deleted = append(deleted, m.ID)
				continue
			}
			w, err := r.parseEntry(shard, m)
			if err != nil {
				bad = append(bad, BadEntry{ID: m.ID, Err: err})
				continue
			}
			ws = append(ws, w)
		}
	}
	return ws, bad, deleted, nil
}

// Claim takes over entries pending longer than minIdle on any consumer
// (XAUTOCLAIM), from cursor start ("0-0" to begin). It returns the claimed
// windows, entries that cannot be parsed, the ids Redis reported as
// deleted (by hand, while pending: their windows cannot be published; Redis
// has already removed them from the pending list), and the next cursor
// ("0-0" when the scan is complete).
func (r *Repo) Claim(ctx context.Context, shard int, consumer string, minIdle time.Duration, start string, count int) (ws []Window, bad []BadEntry, deleted []string, next string, err error) {
	msgs, next, deleted, err := r.rdb.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
		Stream: r.keys.Stream(shard), Group: Group, Consumer: consumer,
		MinIdle: minIdle, Start: start, Count: int64(count),
	}).Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "NOGROUP") {
			if gerr := r.EnsureGroup(ctx, shard); gerr != nil {
				return nil, nil, nil, "0-0", gerr
			}
			if r.moved(ctx, shard, consumer) {
				return nil, nil, nil, "0-0", nil
			}
			return nil, nil, nil, "0-0", fmt.Errorf("repo.Claim: shard %d: %w (%w)", shard, ErrGroupRecreated, err)
		}
		return nil, nil, nil, "", wrap("repo.Claim", err)
	}
	ws, bad = r.parseEntries(shard, msgs, nil, nil)
	return ws, bad, deleted, next, nil
}

// LastID is the id of the newest entry in shard's stream, "" when it holds
// none (or does not exist): every entry added later has a larger id.
func (r *Repo) LastID(ctx context.Context, shard int) (string, error) {
	msgs, err := r.rdb.XRevRangeN(ctx, r.keys.Stream(shard), "+", "-", 1).Result()
	if err != nil {
		return "", wrap("repo.LastID", err)
	}
	if len(msgs) == 0 {
		return "", nil
	}
	return msgs[0].ID, nil
}

// PendingIDs lists up to count ids of entries pending for consumer in
// shard's stream, from start (inclusive) on, in id order. It reads only:
// unlike a re-read with XREADGROUP, it leaves each entry's idle time and
// delivery count as they were, so another replica's claimer still sees
// how long ago the entry was read.
func (r *Repo) PendingIDs(ctx context.Context, shard int, consumer, start string, count int) ([]string, error) {
	ps, err := r.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: r.keys.Stream(shard), Group: Group, Start: start, End: "+", Count: int64(count), Consumer: consumer,
	}).Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "NOGROUP") {
			// Redis answered: the stream or group is gone, which the
			// caller's next Read finds, recreates and reports.
			return nil, fmt.Errorf("repo.PendingIDs: shard %d: %w (%w)", shard, ErrNoGroup, err)
		}
		return nil, wrap("repo.PendingIDs", err)
	}
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids, nil
}

// Drop acknowledges and deletes entries that can never be flushed, in one
// script: acknowledged but not deleted (a connection cut between the two
// commands of a pipeline), an entry stayed in the stream for good, behind
// the group's last delivered id and pending nowhere, where no read, claim
// or flush reaches it. (Not MULTI: README's ACL user has no @transaction.)
func (r *Repo) Drop(ctx context.Context, shard int, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return wrap("repo.Drop", dropScript.Run(ctx, r.rdb, []string{r.keys.Stream(shard)}, args...).Err())
}

// dropScript acknowledges and deletes stream entries.
//
// KEYS[1]  the shard's stream
// ARGV     the entries' ids
// Returns the number of entries deleted.
// unpack takes at most a few thousand values (Lua's C stack), so by 1000.
var dropScript = redis.NewScript(`
local n = 0
for i = 1, #ARGV, 1000 do
  local j = math.min(i + 999, #ARGV)
  redis.call('XACK', KEYS[1], '` + Group + `', unpack(ARGV, i, j))
  n = n + redis.call('XDEL', KEYS[1], unpack(ARGV, i, j))
end
return n`)

func (r *Repo) parseEntries(shard int, msgs []redis.XMessage, ws []Window, bad []BadEntry) ([]Window, []BadEntry) {
	for _, m := range msgs {
		w, err := r.parseEntry(shard, m)
		if err != nil {
			bad = append(bad, BadEntry{ID: m.ID, Err: err})
			continue
		}
		ws = append(ws, w)
	}
	return ws, bad
}

// BadEntry is a stream entry that cannot be flushed (its fields do not
// parse: written by an incompatible version, or by another writer under
// the prefix), with why: the caller drops it, so the reason, which quotes
// what the entry held, is all that is left of it.
type BadEntry struct {
	ID  string
	Err error
}

// parseEntry reads an entry's fields; its due time is its id's ms part (when
// the window opened, by Redis's clock) plus W + grace + 1 ms (Repo.delay).
func (r *Repo) parseEntry(shard int, m redis.XMessage) (Window, error) {
	k, ok := m.Values["k"].(string)
	if !ok {
		// The fields found tell a version skew (8c32588 and earlier wrote
		// a, u, t) from a foreign writer.
		return Window{}, fmt.Errorf("entry %s: no field \"k\", fields %q", m.ID, slices.Sorted(maps.Keys(m.Values)))
	}
	w := Window{Shard: shard, ID: m.ID}
	var err error
	if w.ActivityID, w.UserID, w.ItemType, err = ParseEntryComboKey(k); err != nil {
		return Window{}, fmt.Errorf("entry %s: %w", m.ID, err)
	}
	opened, err := openedAt(m.ID)
	if err != nil {
		return Window{}, fmt.Errorf("entry %s: %w", m.ID, err)
	}
	w.Due = opened + r.delay.Milliseconds()
	return w, nil
}

// openedAt is when a window's entry was added, by Redis's clock (ms): its
// id's ms part.
func openedAt(id string) (int64, error) {
	msPart, _, _ := strings.Cut(id, "-")
	opened, err := strconv.ParseInt(msPart, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("id: %w", err)
	}
	return opened, nil
}
