package rpcserver

import (
	"net"
	"testing"
	"time"
)

// A second Close of the server's listener closes nothing: netpoll's closed
// its descriptor's number again, by then another file's, here those of
// listeners opened after the first Close (the lowest free numbers).
func TestListenerClosesItsDescriptorOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nl, err := Listener(ln)
	if err != nil {
		t.Fatal(err)
	}
	if err := nl.Close(); err != nil {
		t.Fatal(err)
	}
	var later []net.Listener
	for range 4 { // take the numbers the first Close freed
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		later = append(later, l)
	}
	_ = nl.Close() // as Kitex does, 100 ms after the first
	for _, l := range later {
		c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second)
		if err != nil {
			t.Fatalf("a listener opened after the first Close was closed by the second: %v", err)
		}
		c.Close()
	}
}
