package main

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// comboKey is CONTRACT.md §2's combo key: what one window aggregates.
type comboKey struct {
	Activity int64
	User     int64
	ItemType string
}

// itemTypes include bytes that must not corrupt Redis keys (':', '{', '}',
// a space, CJK), so every run also exercises key encoding.
var itemTypes = []string{"rose", "rocket", "超级火箭", "crown:{gold} 1"}

// workload builds the contributions of one run. Every run gets its own
// activity id, so its pushes are told apart from a previous run's trailing
// ones, and ids start at the run's start time in ns, so they never collide
// with an id an earlier run sent within the service's dedupe period (no run
// sends 1e9 reports per second).
type workload struct {
	activity int64
	nextID   atomic.Int64
}

func newWorkload() *workload {
	now := time.Now()
	w := &workload{activity: now.UnixMicro()}
	w.nextID.Store(now.UnixNano())
	return w
}

// key is combo key number k of the run: users 1000, 1001, ... each sending
// every item type, so k maps to one (user, item_type) pair and back.
func (w *workload) key(k int64) comboKey {
	n := int64(len(itemTypes))
	return comboKey{Activity: w.activity, User: 1000 + k/n, ItemType: itemTypes[k%n]}
}

// contribution is the next report on key k. created_at is now: the service
// aggregates by it, and the bench's clock is the service's (same host).
// Display fields have realistic sizes because the window keeps them in Redis
// (they count in the memory per window).
func (w *workload) contribution(k comboKey) *combo.Contribution {
	id := w.nextID.Add(1)
	user := strconv.FormatInt(k.User, 10)
	return &combo.Contribution{
		Id:         id,
		ActivityId: k.Activity,
		UserId:     k.User,
		StarId:     7,
		ItemId:     int64(len(k.ItemType)),
		ItemType:   k.ItemType,
		ItemName:   k.ItemType,
		ItemIcon:   "https://cdn.example.com/items/gift.png",
		Nickname:   "fan" + user,
		AvatarUrl:  "https://cdn.example.com/avatars/" + user + ".jpg",
		Quantity:   int32(id%9) + 1, // varied, so conservation checks sums, not counts
		CreatedAt:  time.Now().UnixMilli(),
	}
}

func keyOf(c *combo.Contribution) comboKey {
	return comboKey{Activity: c.ActivityId, User: c.UserId, ItemType: c.ItemType}
}

// budget hands out the -n report budget across callers; unlimited when n <= 0.
type budget struct {
	left      atomic.Int64
	unlimited bool
}

func newBudget(n int64) *budget {
	b := &budget{unlimited: n <= 0}
	b.left.Store(n)
	return b
}

// take grants up to k reports, 0 when the budget is spent.
func (b *budget) take(k int) int {
	if b.unlimited {
		return k
	}
	left := b.left.Add(-int64(k))
	switch {
	case left >= 0:
		return k
	case left > -int64(k):
		return k + int(left)
	default:
		return 0
	}
}
