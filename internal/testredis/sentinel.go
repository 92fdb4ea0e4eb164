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

// StartSentinel starts a Redis Sentinel on a free port that watches master
// under name alone (quorum 1) and fails it over quickly: down after 500 ms
// without an answer. For a master that serves TLS it serves TLS too, with
// the master's certificates, and talks TLS to the master.
func StartSentinel(tb testing.TB, name string, master *Server) *Server {
	tb.Helper()
	require(tb, "redis-server")
	s := &Server{Dir: tb.TempDir(), tb: tb, TLS: master.TLS, sentinel: fmt.Sprintf(
		"sentinel monitor %[1]s 127.0.0.1 %[2]d 1\n"+
			"sentinel down-after-milliseconds %[1]s 500\n"+
			"sentinel failover-timeout %[1]s 5000\n", name, master.Port)}
	s.launch(FreePort)
	return s
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
