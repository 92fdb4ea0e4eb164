package main

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/combo-service/combo-service/conf"
	"github.com/combo-service/combo-service/internal/testredis"
)

// unansweredDial is an address whose dials hang, as a Sentinel's host
// gone from the network does: a listener with an accept queue of one,
// filled and never accepted, whose kernel then drops every SYN.
func unansweredDial(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	for range 8 { // fill the queue until a dial goes unanswered
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Skip("could not make a listener whose dials go unanswered")
	return ""
}

// A Sentinel whose dial goes unanswered (its host gone) costs a node
// watch's reading redis.timeout, and the next Sentinel is asked within
// the reading's budget (mutant: the one-off clients' dial given go-redis's
// 5 s, the whole budget spent on the first Sentinel and no node read).
func TestNodeReadingOutlastsASentinelWhoseDialHangs(t *testing.T) {
	master := testredis.Start(t, testredis.Options{})
	sentinel := testredis.StartSentinel(t, sentinelMaster, master)
	r := conf.Default().Redis
	r.Addr, r.Timeout = "", 300*time.Millisecond
	r.SentinelAddrs, r.SentinelMaster = []string{unansweredDial(t), sentinel.Addr}, sentinelMaster
	read, budget := policyReader(r, nil)
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	got, _ := read(ctx)
	if got[master.Addr] != "noeviction" {
		t.Fatalf("read %v within %v, want the master %s read through the second Sentinel", got, budget, master.Addr)
	}
}
