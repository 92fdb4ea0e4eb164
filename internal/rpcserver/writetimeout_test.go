package rpcserver

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/kitex/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/kitex_gen/combo"
)

// bigAnswers answers MergeLatest with 16 MB, more than the socket buffers
// of both ends hold.
type bigAnswers struct{ okService }

func (bigAnswers) MergeLatest(context.Context, *combo.MergeLatestRequest) (*combo.MergeLatestResponse, error) {
	r := &combo.ContributionRecord{Nickname: strings.Repeat("x", 1<<10)}
	records := make([]*combo.ContributionRecord, 16<<10)
	for i := range records {
		records[i] = r
	}
	return &combo.MergeLatestResponse{Records: records}, nil
}

// closed signals each connection the server closes.
type closed struct {
	passInbound
	ch chan struct{}
}

func (c closed) OnInactive(ctx context.Context, _ net.Conn) context.Context {
	c.ch <- struct{}{}
	return ctx
}

// A caller that asks and never reads the answer leaves the server unable
// to write it once the socket buffers are full. The server closes that
// connection within the write timeout (ReadWriteTimeout). Without one, the
// connection, its slot of max_connections, its handler and the answer were
// held until the idle closer's MaxConnIdle (a minute here): the caller
// sends nothing more, so nothing else times out.
func TestUnreadAnswerCutsTheConnection(t *testing.T) {
	const timeout = 300 * time.Millisecond
	gone := closed{ch: make(chan struct{}, 10)}
	addr := runServer(t, &bigAnswers{}, append(options(prometheus.NewRegistry(), 100, time.Minute, timeout, MaxAheadBytes, newInFlight(MaxLargeInFlightBytes, ReadWriteTimeout, nil), nil),
		server.WithBoundHandler(gone))...)
	start := time.Now()
	conn := askMergeLatest(t, addr)
	defer conn.Close()
	select {
	case <-gone.ch:
		t.Logf("closed %s after the request", time.Since(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("the connection still open 10 s after its answer stopped being read (write timeout %s)", timeout)
	}
}

// askMergeLatest dials addr, with a small receive buffer, and sends one
// MergeLatest, reading no answer.
func askMergeLatest(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	call := request("MergeLatest", &combo.ComboServiceMergeLatestArgs{Req: &combo.MergeLatestRequest{}})
	if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(call))), call...)); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn
}
