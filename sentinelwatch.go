package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/metrics"
)

// sentinelWatch makes the service's clients leave a master the Sentinels
// failed over from as soon as any Sentinel says so. go-redis's failover
// client hears of a failover on one Sentinel only, the first that
// answered it, and keeps to that one while it is down: it asks the others
// only when it dials, and a pool with its connections open does not dial.
// So after that one Sentinel went down (one of three, which Sentinel is
// built to survive) the next failover of a master still up went unheard
// until the old master was demoted, about 10 s later, and every report it
// acknowledged meanwhile was lost with it (a review measured 477 lost
// against 40 with that Sentinel up). Here every Sentinel is subscribed to
// +switch-master; when one announces that redis.sentinel_master moved,
// every connection the service dialed to the old address is closed, as
// go-redis does on its own Sentinel's word. The next command on each
// fails (its caller retries, UNAVAILABLE) and the pool dials again,
// asking the Sentinels where the master is now.
//
// Shutdown order: stopped by openRedis's closeAll (run's deferred
// closeRedis, the last of run's stops but the count of the libraries'
// thinned log lines, deferred before it), before the service's Redis
// clients close, after the worker's shutdown and every loop that uses them.
type sentinelWatch struct {
	master string
	log    *zap.Logger
	panics prometheus.Counter
	conns  *connsByAddr
	subs   []*redis.PubSub
	done   sync.WaitGroup
}

// watchSentinels subscribes to +switch-master on each of r's Sentinels
// (each PubSub reconnects by itself while its Sentinel is down) and acts on
// what they announce until stop.
// Its connections are made by dial, the service's own dialer (with TLS,
// one that reads the files again at each dial, so a subscription made
// again after a certificate's rotation presents the new one), untracked:
// a Sentinel's connections are never a master's. A panic acting on an
// announcement is logged on log and counted in m's
// combo_loop_panics_total{loop="sentinel_watch"}, chosen here so that no
// caller can count it under another loop's runbook.
func watchSentinels(r conf.Redis, tlsConfig *tls.Config, dial dialFunc, conns *connsByAddr, log *zap.Logger, m *metrics.Metrics) *sentinelWatch {
	w := &sentinelWatch{master: r.SentinelMaster, log: log, panics: m.LoopPanics.WithLabelValues(metrics.LoopSentinelWatch), conns: conns}
	for _, addr := range r.SentinelAddrs {
		o := nodeOptions(r, tlsConfig, addr, r.SentinelUsername, r.SentinelPassword)
		o.Dialer = dial
		sc := redis.NewSentinelClient(o)
		ps := sc.Subscribe(context.Background()) // no channel yet: nothing dialed
		w.subs = append(w.subs, ps)
		w.done.Go(func() {
			defer sc.Close()
			// Dialed here, not at start: a Sentinel whose host is gone
			// takes redis.timeout to fail. The channel is kept either way,
			// and subscribed again each time the connection is made anew.
			_ = ps.Subscribe(context.Background(), switchMaster)
			for msg := range ps.Channel() {
				w.switched(addr, msg.Payload)
			}
		})
	}
	return w
}

// switched acts on one +switch-master announcement: "<name> <old ip>
// <old port> <new ip> <new port>". A panic is counted and logged and the
// watch goes on: the next failover must still be acted on.
func (w *sentinelWatch) switched(sentinel, payload string) {
	defer func() {
		if p := recover(); p != nil {
			w.panics.Inc()
			w.log.Error("recovered panic acting on a Sentinel's announcement", zap.String("sentinel", sentinel),
				zap.String("payload", payload), zap.Any("panic", p), zap.Stack("stack"))
		}
	}()
	f := strings.Fields(payload)
	if len(f) != 5 || f[0] != w.master {
		return
	}
	from, to := net.JoinHostPort(f[1], f[2]), net.JoinHostPort(f[3], f[4])
	if n := w.conns.closeAll(from); n > 0 {
		w.log.Warn("a Sentinel announced a failover: closed the connections to the old master",
			zap.String("sentinel", sentinel), zap.String("from", from), zap.String("to", to), zap.Int("connections", n))
	}
}

// stop ends every subscription and waits for their goroutines.
func (w *sentinelWatch) stop() {
	for _, ps := range w.subs {
		_ = ps.Close()
	}
	w.done.Wait()
}

// connsByAddr is every open connection a dialer made, by the address it
// was asked for (a master's, as the Sentinels named it).
type connsByAddr struct {
	mu    sync.Mutex
	conns map[string]map[net.Conn]struct{}
	// left counts the announcements that a master left each address: a
	// dial that began before one and ended after it was asked for the old
	// master, and would be kept past closeAll.
	left map[string]uint64
}

func newConnsByAddr() *connsByAddr {
	return &connsByAddr{conns: make(map[string]map[net.Conn]struct{}), left: make(map[string]uint64)}
}

// dialFunc dials a Redis or a Sentinel (go-redis's Options.Dialer).
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// dialer wraps dial so that each connection it makes is kept here until
// closed.
func (t *connsByAddr) dialer(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		t.mu.Lock()
		left := t.left[addr]
		t.mu.Unlock()
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, t: t, addr: addr}
		t.mu.Lock()
		if t.left[addr] != left {
			t.mu.Unlock()
			_ = c.Close()
			return nil, fmt.Errorf("dial %s: a Sentinel announced the master left it while it was dialed", addr)
		}
		if t.conns[addr] == nil {
			t.conns[addr] = make(map[net.Conn]struct{})
		}
		t.conns[addr][tc] = struct{}{}
		t.mu.Unlock()
		if _, ok := c.(syscall.Conn); ok {
			// go-redis checks a pooled connection through its socket
			// before reusing it; a wrapper without this would hide it.
			return trackedSyscallConn{tc}, nil
		}
		return tc, nil
	}
}

// closeAll closes every open connection to addr, and any being dialed,
// and says how many were open.
func (t *connsByAddr) closeAll(addr string) int {
	t.mu.Lock()
	t.left[addr]++
	var cs []net.Conn
	for c := range t.conns[addr] {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
	return len(cs)
}

// trackedConn leaves connsByAddr when closed.
type trackedConn struct {
	net.Conn
	t    *connsByAddr
	addr string
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	if m := c.t.conns[c.addr]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(c.t.conns, c.addr)
		}
	}
	c.t.mu.Unlock()
	return c.Conn.Close()
}

// trackedSyscallConn is a trackedConn whose socket go-redis can check.
type trackedSyscallConn struct{ *trackedConn }

func (c trackedSyscallConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}
