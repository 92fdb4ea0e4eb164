package repo_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/combo-service/combo-service/internal/testredis"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/repo"
)

// partCutConn is a connection that, once a write of its carries a script
// (evalsha) and no connection sharing cut was cut before, delivers the
// first keep replies and then EOF: Redis ran the rest, their answers lost.
// After that the others sharing cut refuse every write.
type partCutConn struct {
	net.Conn
	cut   *atomic.Bool
	keep  int
	armed bool
	out   []byte // the keep replies, once read
	done  bool
}

func (c *partCutConn) Write(b []byte) (int, error) {
	if !c.armed && c.cut.Load() {
		// Another was cut: the node is unreachable from now on, on every
		// connection, so go-redis cannot send the lost part again (it
		// would be answered duplicate, as README says of such re-sends).
		c.Conn.Close()
		return 0, errors.New("test: node unreachable")
	}
	if bytes.Contains(b, []byte("evalsha")) {
		c.armed = true
		c.cut.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *partCutConn) Read(b []byte) (int, error) {
	if !c.armed {
		return c.Conn.Read(b)
	}
	if !c.done {
		c.done = true
		rd := bufio.NewReader(c.Conn)
		for range c.keep {
			reply, err := readRESP2(rd)
			if err != nil {
				return 0, err
			}
			c.out = append(c.out, reply...)
		}
	}
	if len(c.out) == 0 {
		c.Conn.Close()
		return 0, io.EOF
	}
	n := copy(b, c.out)
	c.out = c.out[n:]
	return n, nil
}

// A pipeline spanning two masters (a batch whose shards' nodes are not
// known): the moving shard's script on one is refused TRYAGAIN and comes
// first in the pipeline's errors; on the other, a script answers (opens
// its window), then the connection breaks and cannot be dialed again.
// The window the answered script opened must still be counted
// (WindowsOpened): skipping the pipeline's error handling on TRYAGAIN
// dropped that answer, the dial error go-redis stamped on it standing.
func TestTryAgainFirstKeepsAnAnswerFromAnotherNode(t *testing.T) {
	ctx := context.Background()
	cl := testredis.StartCluster(t, 3)
	admin := cl.Client(t)
	s := settings()
	s.Shards = 12
	keys := repo.NewKeys(s.Shards)
	byNode := shardsByMaster(t, cl, admin, keys)
	var A, B, C string // A holds the moving shard, B two others; the move goes to C
	for a, shs := range byNode {
		if len(shs) >= 2 && B == "" {
			B = a
		}
	}
	for _, a := range cl.Addrs {
		switch {
		case a == B:
		case A == "" && len(byNode[a]) > 0:
			A = a
		default:
			C = a
		}
	}
	if A == "" || B == "" || C == "" {
		t.Fatalf("masters %v: want one with a shard, one with two, and a third", byNode)
	}
	x, w, v := byNode[A][0], byNode[B][0], byNode[B][1]
	r0 := repo.New(admin, s)
	if err := r0.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r0.EnsureGroups(ctx); err != nil {
		t.Fatal(err)
	}
	var cut atomic.Bool
	d := &net.Dialer{}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == B && cut.Load() {
				return nil, errors.New("test: B unreachable")
			}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil || addr != B {
				return conn, err
			}
			return &partCutConn{Conn: conn, cut: &cut, keep: 2}, nil
		}})
	t.Cleanup(func() { cc.Close() })
	cl.BeginMigration(t, keys.Stream(x), A, C)
	now := time.Now().UnixMilli()
	cs := []*combo.Contribution{
		{Id: 101, ActivityId: 7, UserId: 1, ItemId: 1, ItemType: itemTypeOn(keys, x), Quantity: 1, CreatedAt: now},
		{Id: 202, ActivityId: 7, UserId: 1, ItemId: 1, ItemType: itemTypeOn(keys, w), Quantity: 1, CreatedAt: now},
		{Id: 303, ActivityId: 7, UserId: 1, ItemId: 1, ItemType: itemTypeOn(keys, v), Quantity: 1, CreatedAt: now},
	}
	_, err := repo.New(cc, s).Report(ctx, cs)
	if !cut.Load() {
		t.Fatal("no connection was cut: the test did not test")
	}
	if !errors.Is(err, repo.ErrUnavailable) {
		t.Fatalf("Report: %v, want UNAVAILABLE (report 101's slot is still moving)", err)
	}
	if res, err := r0.Report(ctx, cs[1:2]); err != nil || res[0].Outcome != repo.Duplicate {
		t.Fatalf("report 202 sent again: %+v %v, want duplicate (its script ran and answered)", res, err)
	}
	if n := repo.WindowsOpened(err); n != 1 {
		t.Errorf("WindowsOpened = %d, want 1: report 202 opened its window and its answer came", n)
	}
}
