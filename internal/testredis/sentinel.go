package testredis

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartReplica starts a Redis replicating master, with args as extra
// redis-server arguments, and waits until its link to the master is up.
func StartReplica(tb testing.TB, master *Server, args ...string) *Server {
	tb.Helper()
	r := Start(tb, Options{Args: append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}, args...)})
	c := r.Client()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := c.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			return r
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testredis: replica of %s not linked after 10 s:\n%s", master.Addr, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartSentinel starts one Redis Sentinel watching master under name
// (quorum 1): StartSentinels of one.
func StartSentinel(tb testing.TB, name string, master *Server) *Server {
	tb.Helper()
	return StartSentinels(tb, 1, name, master)[0]
}

// StartSentinels starts n Redis Sentinels on free ports that watch master
// under name, with a quorum of a majority (n/2+1), and fail it over
// quickly: down after 500 ms without an answer. failover-timeout is 2 s,
// not Redis's 3 minutes nor the 5 s it was: a Sentinel that loses the
// leader's election (their votes split, as they may when all see the
// master down at once) gives up after it and starts again only after
// twice it, so a split vote cost 10 s, the whole bound of the tests'
// waits for a new master; now it costs 4 s. For a master that serves
// TLS they serve TLS too, with the master's certificates, and talk TLS to
// the master. It returns once each Sentinel knows the others and the
// master's connected replicas, connected: only then can they agree on a
// failover and have a replica to promote.
func StartSentinels(tb testing.TB, n int, name string, master *Server) []*Server {
	tb.Helper()
	require(tb, "redis-server")
	conf := fmt.Sprintf(
		"sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
			"sentinel down-after-milliseconds %[1]s 500\n"+
			"sentinel failover-timeout %[1]s 2000\n", name, master.Port, n/2+1)
	ss := make([]*Server, n)
	for i := range ss {
		ss[i] = &Server{Dir: tb.TempDir(), tb: tb, TLS: master.TLS, sentinel: conf}
		ss[i].launch(FreePort)
	}
	waitSentinelsKnow(tb, ss, name, master)
	return ss
}

// waitSentinelsKnow waits until each Sentinel of ss lists the others (they
// find each other through the master's hello channel, every 2 s) and as
// many replicas as the master has connected, none flagged down or
// disconnected.
func waitSentinelsKnow(tb testing.TB, ss []*Server, name string, master *Server) {
	tb.Helper()
	ctx := context.Background()
	mc := master.Client()
	deadline := time.Now().Add(15 * time.Second)
	for _, s := range ss {
		sc := redis.NewSentinelClient(s.options())
		for {
			info, err := mc.Info(ctx, "replication").Result()
			want, _ := strconv.Atoi(infoField(info, "connected_slaves"))
			others, _ := sc.Sentinels(ctx, name).Result()
			replicas, _ := sc.Replicas(ctx, name).Result()
			if err == nil && len(others) == len(ss)-1 && len(replicas) == want && allUp(replicas) {
				break
			}
			if time.Now().After(deadline) {
				_ = sc.Close()
				tb.Fatalf("testredis: Sentinel %s knows %d of %d other Sentinels and replicas %v (master has %d) after 15 s",
					s.Addr, len(others), len(ss)-1, replicas, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = sc.Close()
	}
}

// allUp reports whether none of a Sentinel's replicas is flagged down or
// disconnected (a replica so flagged is not promoted).
func allUp(replicas []map[string]string) bool {
	for _, r := range replicas {
		if f := r["flags"]; strings.Contains(f, "disconnected") || strings.Contains(f, "s_down") {
			return false
		}
	}
	return true
}

// startSentinel runs redis-server in sentinel mode on a configuration file
// of its own: a Sentinel rewrites it with what it learns.
func (s *Server) startSentinel() error {
	conf := filepath.Join(s.Dir, "sentinel.conf")
	if _, err := os.Stat(conf); err != nil { // a restart keeps what it learned
		if err := os.WriteFile(conf, []byte(s.sentinel), 0o600); err != nil {
			return err
		}
	}
	args := append([]string{conf, "--sentinel"}, s.listenArgs()...)
	if s.TLS != nil {
		args = append(args, "--tls-replication", "yes") // to the master
	}
	return s.run(args)
}
