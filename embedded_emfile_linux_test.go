package main

import (
	"context"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The embedded Redis goes on accepting after running out of file
// descriptors (EMFILE), as net/http does, instead of ending its accept
// loop for good (mutant: return on an accept error). It runs in a child
// process of this test binary: it lowers the process's descriptor limit.
func TestEmbeddedRedisAcceptsAgainAfterEMFILE(t *testing.T) {
	if runInChild(t, "COMBO_TEST_EMFILE", time.Minute) {
		return
	}
	core, logs := observer.New(zap.WarnLevel)
	addr, stop, err := startEmbedded(miniredis.NewMiniRedis(), "127.0.0.1:0", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	low := old
	low.Cur = uint64(len(fds) + 8)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	// Every descriptor taken but one, which the dial takes: the accept
	// meets EMFILE and says so. Waited for, not guessed at (a loop that
	// had not met it yet let the test pass without testing anything); and
	// tried again if a descriptor the runtime let go meanwhile gave the
	// accept room.
	var fillers []*os.File
	met := false
	for attempt := 0; attempt < 5 && !met; attempt++ {
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				break
			}
			fillers = append(fillers, f)
		}
		if len(fillers) == 0 {
			break
		}
		fillers[len(fillers)-1].Close()
		fillers = fillers[:len(fillers)-1]
		c, err := net.Dial("tcp", addr)
		if err != nil {
			continue
		}
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if met = logs.FilterMessageSnippet("could not accept a connection").Len() > 0; met {
				break
			}
		}
		c.Close()
	}
	for _, f := range fillers {
		f.Close()
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if !met {
		t.Fatalf("the accept loop did not meet EMFILE in 5 tries: the test did not test (logged: %v)", logs.All())
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after EMFILE: %v", err)
	}
}
