package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/metrics"
)

// Tests pinning what a mutation sweep of the root package's small files
// (readiness, healthcheck, ...) found loose: each fails with the mutant
// its comment names.

// /readyz is served concurrently (the kubelet's probe, Docker's
// HEALTHCHECK and a load balancer's each ask on their own connection), so
// readinessLog.note is called from several goroutines at once: it must
// stay race-free and still log each change of kind once, in an order
// that alternates (mutant: the mutex dropped; go test -race reports the
// race on last).
func TestReadinessLogTakesConcurrentProbes(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	r := &readinessLog{log: zap.New(core)}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				if (i+g)%2 == 0 {
					r.note("ok", "")
				} else {
					r.note("redis", "connection refused")
				}
			}
		})
	}
	wg.Wait()
	// Each line is a change from the one before: never two lines of one
	// kind in a row.
	var prev string
	for i, e := range logs.All() {
		kind := "ok"
		if e.Level == zap.WarnLevel {
			kind = "redis"
		}
		if i > 0 && kind == prev {
			t.Fatalf("line %d %q repeats the kind %q of the line before: a change logged twice", i, e.Message, kind)
		}
		prev = kind
	}
}

// The default metrics.addr (":9100") and one on every address
// ("0.0.0.0:9100", "[::]:9100") are listened on by the service, and the
// probe asks 127.0.0.1 on that port, as its Host says (mutant: the host
// left as written; Linux dials an unspecified address as loopback, so
// only the Host tells here, but Windows refuses to connect to one).
// No test probed the default form before.
func TestHealthcheckProbesAWildcardAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hosts := make(chan string, 8)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for _, addr := range []string{":" + port, "0.0.0.0:" + port, "[::]:" + port} {
		if err := healthcheck(addr, "/healthz", 5*time.Second); err != nil {
			t.Errorf("healthcheck of metrics.addr %q: %v, want it to probe 127.0.0.1:%s", addr, err, port)
			continue
		}
		if host := <-hosts; host != "127.0.0.1:"+port {
			t.Errorf("healthcheck of metrics.addr %q asked for host %q, want 127.0.0.1:%s", addr, host, port)
		}
	}
}

// A panic in the eviction watch is said naming that watch in words, as the
// append-only watch's is (TestAppendOnlyWatchKeepsWhatItCannotRead): the
// two share nodeWatch's loop and its line (mutant: evictionRule named
// "append-only watch", its panic said as the other watch's).
func TestEvictionWatchSaysItsPanicByName(t *testing.T) {
	core, logs := observer.New(zapcore.ErrorLevel)
	read := func(context.Context) (map[string]string, error) { panic("boom") }
	w := newEvictionWatch(read, time.Hour, time.Second, nil, zap.New(core), metrics.New(prometheus.NewRegistry()))
	w.once(context.Background())
	if n := logs.FilterMessage("recovered panic in the eviction watch loop").Len(); n != 1 {
		t.Fatalf("logs %v, want the panic said naming the eviction watch", logs.All())
	}
}

// A start check's one-off client of a node (nodeOptions) sends each
// command once: a node answering LOADING (restarted, reading its data
// set), which go-redis retries by default, is asked once and the check
// goes on, within its share of the check's time (mutant: MaxRetries 0,
// go-redis's default of three retries with backoff).
func TestNodeOptionsSendEachCommandOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var infos atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				rd := bufio.NewReader(conn)
				for {
					var args []string
					head, err := rd.ReadString('\n')
					if err != nil {
						return
					}
					var n int
					if _, err := fmt.Sscanf(head, "*%d\r\n", &n); err != nil {
						return
					}
					for range n {
						if _, err := rd.ReadString('\n'); err != nil { // $len
							return
						}
						arg, err := rd.ReadString('\n')
						if err != nil {
							return
						}
						args = append(args, strings.TrimSpace(arg))
					}
					reply := "-LOADING Redis is loading the dataset in memory\r\n"
					if strings.EqualFold(args[0], "info") {
						infos.Add(1)
					} else {
						reply = "-ERR unknown command\r\n" // HELLO: go-redis goes on with RESP2
					}
					if _, err := conn.Write([]byte(reply)); err != nil {
						return
					}
				}
			}()
		}
	}()
	c := redis.NewClient(nodeOptions(conf.Default().Redis, nil, ln.Addr().String(), "", ""))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Info(ctx, "persistence").Err(); err == nil || !strings.HasPrefix(err.Error(), "LOADING") {
		t.Fatalf("INFO of a loading node: %v, want its LOADING", err)
	}
	if n := infos.Load(); n != 1 {
		t.Fatalf("INFO sent %d times to a node answering LOADING, want once (no retries)", n)
	}
}
