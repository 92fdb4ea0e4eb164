package client

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/netpoll"

	"github.com/combo-service/combo-service/internal/testredis"
)

// netpoll reports a connection refused during its non-blocking connect as
// ErrConnClosed, "connection has been closed by peer": a drop's reason
// then sent an operator looking for a replica that closes connections,
// not for one that is not listening. The dial's error says refused, and
// still wraps netpoll's.
func TestRefusedDialSaysRefused(t *testing.T) {
	addr := testredis.ClosedAddr(t)
	_, err := spreadDialer{}.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		t.Fatal("a dial of a closed port succeeded")
	}
	if !strings.Contains(err.Error(), "refused") {
		t.Errorf("refused dial's error %q does not say refused", err)
	}
	if !errors.Is(err, netpoll.ErrConnClosed) {
		t.Errorf("refused dial's error %q does not wrap netpoll's", err)
	}
}
