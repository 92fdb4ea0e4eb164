package main

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A client that sends a command miniredis would panic on is cut, and the
// embedded Redis goes on serving the others: `*0\r\n`, four bytes from
// anything that reached the port, ended the whole service (miniredis's
// Dispatch takes the command's name from an empty array), and a bulk
// length past the int range did too (it allocates the length, plus 2).
func TestEmbeddedRedisCutsAClientSendingWhatCrashedIt(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	addr, stop, err := startEmbedded(miniredis.NewMiniRedis(), "127.0.0.1:0", zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	for _, tc := range []struct{ name, sent string }{
		{"an empty command", "*0\r\n"},
		{"a nil command", "*-1\r\n"},
		{"an empty command after a whole one", "*1\r\n$4\r\nPING\r\n*0\r\n"},
		{"a bulk length whose body and CRLF overflow an int", "*1\r\n$9223372036854775807\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(tc.sent)); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil && !isConnReset(err) {
				t.Fatalf("read %q, then %v; want the connection cut", got, err)
			}
			if want := strings.Repeat("+PONG\r\n", strings.Count(tc.sent, "PING")); string(got) != want {
				t.Fatalf("read %q, want %q: the commands before the bad one answered", got, want)
			}
			if err := rdb.Ping(ctx).Err(); err != nil {
				t.Fatalf("PING from another client: %v", err)
			}
			// The operator is told which client was cut, and why.
			cut := logs.TakeAll()
			if len(cut) != 1 || !strings.Contains(cut[0].Message, "cut a client whose command would have crashed it") {
				t.Fatalf("logged %v, want one warning of the cut", cut)
			}
			if got := cut[0].ContextMap()["client"]; got != c.LocalAddr().String() {
				t.Errorf("the warning names client %v, want %s", got, c.LocalAddr())
			}
			if got, _ := cut[0].ContextMap()["error"].(string); !strings.Contains(got, "connection cut") {
				t.Errorf("the warning's error %q says not why", got)
			}
		})
	}
	// A value holding such bytes is only a value.
	const v = "*0\r\n*-1\r\n$9223372036854775807\r\n"
	if err := rdb.Set(ctx, "v", v, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.Get(ctx, "v").Result(); got != v || err != nil {
		t.Fatalf("GET %q, %v; want %q", got, err, v)
	}
}

// The scanner finds a bad command however the reads split it, and only at
// the head of a command (a bulk string's bytes are a value), saying where
// in the read its line began.
func TestCommandScannerFollowsCommandsAcrossReads(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reads []string
		at    int   // in the last read
		want  error // at the last read; nil before it
	}{
		{"whole", []string{"*0\r\n"}, 0, errEmptyCommand},
		{"after a command", []string{"*1\r\n$4\r\nPING\r\n*-1\r\n"}, 14, errEmptyCommand},
		{"split header", []string{"*1\r\n$4\r\nPING\r\n*", "-1", "\r\n"}, 0, errEmptyCommand},
		{"split bulk", []string{"*2\r\n$3\r\nGET\r\n$4\r\n*0", "\r\n\r\n*0\r\n"}, 4, errEmptyCommand},
		{"a value", []string{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\n*0\r\n\r\n"}, 0, nil},
		{"a nil bulk", []string{"*2\r\n$3\r\nGET\r\n$-1\r\n*0\r\n"}, 18, errEmptyCommand},
		{"long bulk", []string{"*1\r\n$536870913\r\n"}, 4, errBulkTooLong},
		{"longest bulk", []string{"*1\r\n$536870912\r\n"}, 0, nil},
		{"long line", []string{"*1\r\n+", strings.Repeat("x", 64<<10)}, 0, errLineTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s commandScanner
			last := len(tc.reads) - 1
			for i, r := range tc.reads[:last] {
				if _, err := s.scan([]byte(r)); err != nil {
					t.Fatalf("read %d: %v, want none yet", i, err)
				}
			}
			at, err := s.scan([]byte(tc.reads[last]))
			if !errors.Is(err, tc.want) || (err != nil && at != tc.at) {
				t.Fatalf("the last read: %v at %d, want %v at %d", err, at, tc.want, tc.at)
			}
		})
	}
}
