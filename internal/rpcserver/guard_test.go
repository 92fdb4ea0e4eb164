package rpcserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/gopkg/protocol/thrift"
	kclient "github.com/cloudwego/kitex/client"
	"github.com/cloudwego/kitex/pkg/klog"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/server"
	"github.com/cloudwego/kitex/transport"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/combo-service/combo-service/client"
	"github.com/combo-service/combo-service/kitex_gen/combo"
	"github.com/combo-service/combo-service/kitex_gen/combo/comboservice"
	"github.com/combo-service/combo-service/validate"
)

// request is a Thrift binary CALL of method with args.
func request(method string, args thrift.FastCodec) []byte {
	b := make([]byte, thrift.Binary.MessageBeginLength(method)+args.BLength())
	n := thrift.Binary.WriteMessageBegin(b, method, thrift.CALL, 1)
	args.FastWriteNocopy(b[n:], nil)
	return b
}

// listRequest is a CALL of method whose first argument's list field
// (fieldID) claims size items of struct and holds have of them (empty).
func listRequest(method string, fieldID int16, size int32, have int) []byte {
	b := thrift.Binary.AppendMessageBegin(nil, method, thrift.CALL, 1)
	b = append(b, byte(thrift.STRUCT), 0, 1)           // args field 1: the request struct
	b = append(b, byte(thrift.LIST), 0, byte(fieldID)) // its list field
	b = append(b, byte(thrift.STRUCT))
	b = binary.BigEndian.AppendUint32(b, uint32(size))
	for range have {
		b = append(b, byte(thrift.STOP)) // an empty struct
	}
	return append(b, byte(thrift.STOP), byte(thrift.STOP))
}

// typeConfused is a ReportContributions whose list says it holds one
// string of 0x000f0001 bytes (a review's bypass). The generated code reads
// a Contribution there instead: the length's 00 is STOP, an empty struct;
// then 0f 00 01 is the request's field 1, a list again, whose header is
// the string's first bytes: 2^31-1 structs.
func typeConfused() []byte {
	const length = 0x000f0001
	b := thrift.Binary.AppendMessageBegin(nil, "ReportContributions", thrift.CALL, 1)
	b = append(b, byte(thrift.STRUCT), 0, 1, byte(thrift.LIST), 0, 1, byte(thrift.STRING), 0, 0, 0, 1)
	b = binary.BigEndian.AppendUint32(b, length)
	body := make([]byte, length)
	copy(body, []byte{byte(thrift.STRUCT), 0x7f, 0xff, 0xff, 0xff})
	b = append(b, body...)
	return append(b, byte(thrift.STOP), byte(thrift.STOP))
}

// repeatedList is a MergeLatest whose records field comes once per size
// in sizes, each a list of that many empty structs.
func repeatedList(sizes ...int) []byte {
	b := thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1)
	b = append(b, byte(thrift.STRUCT), 0, 1)
	for _, n := range sizes {
		b = append(b, byte(thrift.LIST), 0, 2, byte(thrift.STRUCT))
		b = binary.BigEndian.AppendUint32(b, uint32(n))
		for range n {
			b = append(b, byte(thrift.STOP))
		}
	}
	return append(b, byte(thrift.STOP), byte(thrift.STOP))
}

// repeatedStruct is a ReportContribution whose request's contribution
// field comes n times, each an empty struct (4 bytes on the wire).
func repeatedStruct(n int) []byte {
	b := thrift.Binary.AppendMessageBegin(nil, "ReportContribution", thrift.CALL, 1)
	b = append(b, byte(thrift.STRUCT), 0, 1)
	for range n {
		b = append(b, byte(thrift.STRUCT), 0, 1, byte(thrift.STOP))
	}
	return append(b, byte(thrift.STOP), byte(thrift.STOP))
}

func batch(n int) *combo.ComboServiceReportContributionsArgs {
	req := &combo.ReportContributionsRequest{}
	for i := range n {
		req.Contributions = append(req.Contributions, &combo.Contribution{Id: int64(i + 1), ActivityId: 7, UserId: 42,
			ItemId: 3, ItemType: "rose", ItemName: "烟花", Nickname: "小明", Quantity: 1, CreatedAt: 1732950000000})
	}
	return &combo.ComboServiceReportContributionsArgs{Req: req}
}

func TestCheckRequest(t *testing.T) {
	valid := map[string][]byte{
		"a batch of 1000":             request("ReportContributions", batch(1000)),
		"a list of MaxContainerItems": listRequest("MergeLatest", 2, MaxContainerItems, MaxContainerItems),
		"one report":                  request("ReportContribution", &combo.ComboServiceReportContributionArgs{Req: &combo.ReportContributionRequest{Contribution: batch(1).Req.Contributions[0]}}),
		"an empty merge":              request("MergeLatest", &combo.ComboServiceMergeLatestArgs{Req: &combo.MergeLatestRequest{ActivityId: 7}}),
		"a list of none":              listRequest("ReportContributions", 1, 0, 0),
		"records just past the contract's bound, for the handler to refuse": listRequest("MergeLatest", 2, validate.MaxMergeRecords+1, validate.MaxMergeRecords+1),
		"a list field twice, MaxContainerItems in all":                      repeatedList(MaxContainerItems/2, MaxContainerItems/2),
		"no arguments at all": append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1), byte(thrift.STOP)),
		// Fields the IDL does not have, as a newer client sends: the
		// generated code skips them by their wire type.
		"a set the IDL does not have": append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1),
			byte(thrift.STRUCT), 0, 1, byte(thrift.SET), 0, 9, byte(thrift.I32), 0, 0, 0, 1, 0, 0, 0, 7, 0, 0),
		"a map the IDL does not have": append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1),
			byte(thrift.STRUCT), 0, 1, byte(thrift.MAP), 0, 9, byte(thrift.I32), byte(thrift.I32), 0, 0, 0, 0, 0, 0),
		// No item budget for them: the generated code skips them without
		// allocating, and the request's size bounds the walk.
		"a map of twice MaxContainerItems items, keys and values, the IDL does not have": append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1),
			append(append([]byte{byte(thrift.STRUCT), 0, 1, byte(thrift.MAP), 0, 9, byte(thrift.BYTE), byte(thrift.BYTE)},
				binary.BigEndian.AppendUint32(nil, MaxContainerItems)...), append(make([]byte, 2*MaxContainerItems), 0, 0)...)...),
	}
	for name, b := range valid {
		if err := CheckRequest(b); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}
	refused := map[string][]byte{
		// 49 bytes that made Kitex's generated code allocate some 300 GB.
		"a list claiming 2^31-1 items":  listRequest("ReportContributions", 1, 1<<31-1, 0),
		"records claiming 2^31-1 items": listRequest("MergeLatest", 2, 1<<31-1, 0),
		"a list of MaxContainerItems+1": listRequest("MergeLatest", 2, MaxContainerItems+1, MaxContainerItems+1),
		// The generated code allocates each copy of a repeated field.
		"a list field twice, MaxContainerItems in all and one more": repeatedList(MaxContainerItems/2, MaxContainerItems/2+1),
		"a list short of its items":                                 listRequest("ReportContributions", 1, 5, 2),
		"a negative size":                                           listRequest("ReportContributions", 1, -1, 0),
		"a batch cut short":                                         request("ReportContributions", batch(3))[:100],
		"a string longer than the bytes": append(thrift.Binary.AppendMessageBegin(nil, "ReportContribution", thrift.CALL, 1),
			byte(thrift.STRUCT), 0, 1, byte(thrift.STRUCT), 0, 1, byte(thrift.STRING), 0, 9, 0x7f, 0xff, 0xff, 0xff),
		// The generated code reads the IDL's list<Contribution> whatever
		// the wire says: a list of one string would be read as structs,
		// and a list header hidden in the string with them.
		"a list of strings where the IDL has structs": typeConfused(),
		// Skip indexes its table by a container's element types before
		// it counts the items: an empty one panicked as well.
		"an empty set of type 0x93": append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1),
			byte(thrift.STRUCT), 0, 1, byte(thrift.SET), 0, 9, 0x93, 0, 0, 0, 0, 0, 0),
		"an empty map of keys of type 0x80": append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1),
			byte(thrift.STRUCT), 0, 1, byte(thrift.MAP), 0, 9, 0x80, byte(thrift.I32), 0, 0, 0, 0, 0, 0),
		"an empty list of UUIDs": append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1),
			byte(thrift.STRUCT), 0, 1, byte(thrift.LIST), 0, 9, 16, 0, 0, 0, 0, 0, 0),
		// Each copy of a struct field is a struct of its own too: 64 MB of
		// copies made the generated code allocate 2.3 GB and take 0.9 s,
		// 50 times the largest valid request.
		"a struct field past MaxContainerItems copies": repeatedStruct(MaxContainerItems + 1),
		// Type bytes of 0x80 and more are negative TTypes: Skip indexed
		// its table with them and panicked.
		"a field of type 0x93": append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1),
			byte(thrift.STRUCT), 0, 1, 0x93, 0, 1, 0, 0),
		"a field of type 0x42": append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1),
			byte(thrift.STRUCT), 0, 1, 0x42, 0, 1, 0, 0),
	}
	for name, b := range refused {
		if err := CheckRequest(b); err == nil {
			t.Errorf("%s: passed", name)
		}
	}
}

// The guard runs on every request the service takes.
func BenchmarkCheckRequest(b *testing.B) {
	for _, n := range []int{1, 50} {
		req := request("ReportContributions", batch(n))
		b.Run(fmt.Sprintf("batch-of-%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(req)))
			for b.Loop() {
				if err := CheckRequest(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// okService answers every call with an empty success.
type okService struct{}

func (okService) ReportContribution(context.Context, *combo.ReportContributionRequest) (*combo.ReportContributionResponse, error) {
	return &combo.ReportContributionResponse{}, nil
}

func (okService) ReportContributions(_ context.Context, req *combo.ReportContributionsRequest) (*combo.ReportContributionsResponse, error) {
	return &combo.ReportContributionsResponse{Results: make([]*combo.ReportContributionResponse, len(req.Contributions))}, nil
}

func (okService) MergeLatest(context.Context, *combo.MergeLatestRequest) (*combo.MergeLatestResponse, error) {
	return &combo.MergeLatestResponse{}, nil
}

// serve runs a server with the service's options and returns its address.
func serve(t *testing.T, maxConns int) string {
	t.Helper()
	return serveIdle(t, maxConns, MaxConnIdle)
}

// serveIdle is serve with idle connections closed after idle.
func serveIdle(t *testing.T, maxConns int, idle time.Duration) string {
	t.Helper()
	return serveWith(t, maxConns, idle, ReadWriteTimeout)
}

// serveWith is serve with idle connections closed after idle, and
// requests read within readWrite.
func serveWith(t *testing.T, maxConns int, idle, readWrite time.Duration) string {
	t.Helper()
	return serveAhead(t, maxConns, idle, readWrite, MaxAheadBytes)
}

// serveAhead is serveWith with at most maxAhead bytes of requests sent
// ahead on a connection.
func serveAhead(t *testing.T, maxConns int, idle, readWrite time.Duration, maxAhead int) string {
	t.Helper()
	return runServer(t, &okService{}, options(prometheus.NewRegistry(), maxConns, idle, readWrite, maxAhead, newInFlight(MaxLargeInFlightBytes, ReadWriteTimeout, nil), nil)...)
}

// runServer serves svc with opts on a listener of its own until the test
// ends, and returns its address.
func runServer(t *testing.T, svc combo.ComboService, opts ...server.Option) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	svr := comboservice.NewServer(svc, append(opts, server.WithListener(ln), StopOn(ctx))...)
	done := make(chan error, 1)
	go func() { done <- svr.Run() }()
	t.Cleanup(func() {
		stop()
		select { // Kitex waits at most its exit wait time for the calls under way
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the server did not stop within 30 s of its StopOn context ending")
		}
	})
	return ln.Addr().String()
}

func report(addr string, opts ...kclient.Option) error {
	cli, err := comboservice.NewClient(client.ServiceName, append([]kclient.Option{kclient.WithHostPorts(addr),
		kclient.WithTransportProtocol(transport.TTHeaderFramed), kclient.WithRPCTimeout(2 * time.Second)}, opts...)...)
	if err != nil {
		return err
	}
	_, err = cli.ReportContributions(context.Background(), batch(2).Req)
	return err
}

// The 49-byte request that killed the process is refused, and the server
// goes on; so is an unframed one. A framed client is served as before.
func TestGuardedServer(t *testing.T) {
	addr := serve(t, 100)
	for name, payload := range map[string][]byte{
		"framed, a list claiming 2^31-1 items":      listRequest("ReportContributions", 1, 1<<31-1, 0),
		"framed, records claiming 2^31-1":           listRequest("MergeLatest", 2, 1<<31-1, 0),
		"framed, a list of strings read as structs": typeConfused(),
	} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		frame := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
		if _, err := conn.Write(append(frame, payload...)); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		var one [1]byte
		_, _ = conn.Read(one[:]) // an exception or the connection closed: either way, answered
		conn.Close()
		if err := report(addr); err != nil {
			t.Fatalf("after %s: the server no longer serves: %v", name, err)
		}
	}
	// A method the service does not have is walked by wire type only,
	// and Kitex answers it without decoding it: the list of strings that
	// ReportContributions would read as structs is harmless there.
	unknown := typeConfused()
	unknown = append(thrift.Binary.AppendMessageBegin(nil, "NoSuchMethod", thrift.CALL, 1),
		unknown[thrift.Binary.MessageBeginLength("ReportContributions"):]...)
	if err := CheckRequest(unknown); err != nil {
		t.Fatalf("an unknown method's arguments refused: %v", err)
	}
	if answer := call(t, addr, unknown); !strings.Contains(string(answer), "method NoSuchMethod") {
		t.Errorf("an unknown method answered %q, want Kitex's exception naming it", answer)
	} else if _, typ, _, _, _ := thrift.Binary.ReadMessageBegin(answer); typ != thrift.EXCEPTION ||
		!bytes.Contains(answer, []byte{byte(thrift.I32), 0, 2, 0, 0, 0, 20}) {
		// README tells callers of other stacks it is type 20 (Kitex's
		// unknown service), not Thrift's 1 (unknown method).
		t.Errorf("an unknown method answered %q, want a TApplicationException of type 20", answer)
	}
	if err := report(addr); err != nil {
		t.Fatalf("after an unknown method: the server no longer serves: %v", err)
	}
	// A newer client's field the IDL does not have is skipped, and the
	// request answered.
	answer := call(t, addr, withExtraField(extraFields()["13: list<string>"]))
	if _, typ, _, _, err := thrift.Binary.ReadMessageBegin(answer); err != nil || typ != thrift.REPLY {
		t.Errorf("a contribution with a 13: list<string> answered %q, want a reply", answer)
	}
	if err := report(addr, kclient.WithTransportProtocol(transport.PurePayload)); err == nil {
		t.Error("an unframed request was taken")
	}
	// HTTP/2 (gRPC) decodes with a codec of its own, past the check: the
	// server does not speak it.
	if err := report(addr, kclient.WithTransportProtocol(transport.GRPC)); err == nil {
		t.Error("a gRPC request was taken")
	}
	if err := report(addr, kclient.WithTransportProtocol(transport.Framed)); err != nil {
		t.Errorf("a Framed client: %v", err)
	}
}

// call sends payload to addr in a Framed request and returns the answer's
// payload (nil if the connection ended without one).
func call(t *testing.T, addr string, payload []byte) []byte {
	t.Helper()
	conn := dialSend(t, addr, append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...))
	defer conn.Close()
	answer, err := readAnswer(conn)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("an answer cut short: %v", err)
	}
	return answer
}

// dialSend dials addr, gives the connection 5 s in all, and writes data.
func dialSend(t *testing.T, addr string, data []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(data); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn
}

// readAnswer reads one Framed answer's payload from conn: io.EOF (or
// another error) when the connection ended, or timed out, before one
// began, io.ErrUnexpectedEOF when it was cut short.
func readAnswer(conn net.Conn) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, io.EOF
		}
		return nil, err
	}
	answer := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, answer); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	return answer, nil
}

// Connections past max_connections are closed as they are accepted.
func TestConnectionLimit(t *testing.T) {
	addr := serve(t, 2)
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var one [1]byte
	if _, err := c.Read(one[:]); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a third connection over a limit of 2: read %v, want it closed", err)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	deadline := time.Now().Add(5 * time.Second)
	for err := report(addr); err != nil; err = report(addr) {
		if time.Now().After(deadline) {
			t.Fatalf("no call served once the idle connections closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A connection that sends nothing is closed after the idle time; one in
// use, with calls closer together than that, is not.
func TestIdleConnectionsAreClosed(t *testing.T) {
	// The calls below come idle/10 apart: a host that stalls this test
	// for most of idle between two of them must not close the connection
	// under it (with 300 ms and calls 100 ms apart, a loaded CI host did).
	const idle = time.Second
	addr := serveIdle(t, 100, idle)
	// Timed from before the dial: the server's idle time starts when it
	// accepts, which may be before Dial returns here (a test that started
	// after it saw the close at 999.6 ms).
	start := time.Now()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(start.Add(5 * time.Second))
	var one [1]byte
	if _, err := conn.Read(one[:]); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a silent connection after %s: read %v, want it closed", time.Since(start), err)
	}
	if d := time.Since(start); d < idle {
		t.Fatalf("closed after %s, before the idle time (%s)", d, idle)
	}
	// Calls on one connection, closer together than the idle time, over
	// more than it: the connection is kept (a Kitex client would redial in
	// silence, so this speaks Framed Thrift itself).
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	call := request("ReportContributions", batch(1))
	for i := range 15 {
		_ = busy.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := busy.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(call))), call...)); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		var size [4]byte
		if _, err := io.ReadFull(busy, size[:]); err != nil {
			t.Fatalf("call %d on a connection in use: %v", i, err)
		}
		if _, err := io.ReadFull(busy, make([]byte, binary.BigEndian.Uint32(size[:]))); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		time.Sleep(idle / 10)
	}
}

// withExtraField is a ReportContribution whose contribution carries
// extra, a field the IDL does not have, after its own: as a newer client
// that added one would send it.
func withExtraField(extra []byte) []byte {
	c := batch(1).Req.Contributions[0]
	b := thrift.Binary.AppendMessageBegin(nil, "ReportContribution", thrift.CALL, 1)
	b = append(b, byte(thrift.STRUCT), 0, 1) // args.req
	b = append(b, byte(thrift.STRUCT), 0, 1) // req.contribution
	body := make([]byte, c.BLength())
	c.FastWriteNocopy(body, nil)
	b = append(b, body[:len(body)-1]...) // the contribution without its STOP
	b = append(b, extra...)
	return append(b, byte(thrift.STOP), byte(thrift.STOP), byte(thrift.STOP))
}

// extraFields are fields 13 a newer client's Contribution may carry.
func extraFields() map[string][]byte {
	str := func(s string) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...) }
	header := func(t thrift.TType, elems []thrift.TType, n uint32) []byte {
		b := append([]byte{byte(t), 0, 13}, func() []byte {
			var e []byte
			for _, t := range elems {
				e = append(e, byte(t))
			}
			return e
		}()...)
		return binary.BigEndian.AppendUint32(b, n)
	}
	return map[string][]byte{
		"13: string":              append([]byte{byte(thrift.STRING), 0, 13}, str("vip")...),
		"13: list<string>":        append(append(header(thrift.LIST, []thrift.TType{thrift.STRING}, 2), str("a")...), str("bc")...),
		"13: list<i64>":           append(header(thrift.LIST, []thrift.TType{thrift.I64}, 2), make([]byte, 16)...),
		"13: map<string,string>":  append(append(header(thrift.MAP, []thrift.TType{thrift.STRING, thrift.STRING}, 1), str("k")...), str("v")...),
		"13: set<i32>":            append(header(thrift.SET, []thrift.TType{thrift.I32}, 3), make([]byte, 12)...),
		"13: list<list<string>>":  append(append(header(thrift.LIST, []thrift.TType{thrift.LIST}, 1), byte(thrift.STRING), 0, 0, 0, 1), str("x")...),
		"13: map<i32,list<i8>>":   append(append(header(thrift.MAP, []thrift.TType{thrift.I32, thrift.LIST}, 1), 0, 0, 0, 1, byte(thrift.BYTE), 0, 0, 0, 2), 1, 2),
		"13: list<struct>":        append(header(thrift.LIST, []thrift.TType{thrift.STRUCT}, 2), byte(thrift.STRING), 0, 1, 0, 0, 0, 0, byte(thrift.STOP), byte(thrift.STOP)),
		"13: an empty list<bool>": header(thrift.LIST, []thrift.TType{thrift.BOOL}, 0),
	}
}

// A newer client's field the IDL does not have is skipped by the
// generated code by its wire type, whatever lists, sets or maps it
// holds: the guard takes it, and the request decodes whole. A type that
// is not Thrift's is refused by both.
func TestNewerClientFields(t *testing.T) {
	want := batch(1).Req.Contributions[0]
	for name, extra := range extraFields() {
		b := withExtraField(extra)
		if err := CheckRequest(b); err != nil {
			t.Errorf("%s: refused: %v", name, err)
			continue
		}
		_, _, _, l, _ := thrift.Binary.ReadMessageBegin(b)
		var args combo.ComboServiceReportContributionArgs
		if _, err := args.FastRead(b[l:]); err != nil {
			t.Errorf("%s: the generated code does not read it: %v", name, err)
		} else if got := args.Req.GetContribution(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded contribution %v, want %v", name, got, want)
		}
	}
	uuid := withExtraField(append([]byte{16, 0, 13}, make([]byte, 16)...))
	if err := CheckRequest(uuid); err == nil {
		t.Error("13: uuid (Thrift type 16): passed")
	}
	_, _, _, l, _ := thrift.Binary.ReadMessageBegin(uuid)
	if _, err := (&combo.ComboServiceReportContributionArgs{}).FastRead(uuid[l:]); err == nil {
		t.Error("13: uuid (Thrift type 16): the generated code reads it, the guard should not refuse it")
	}
}

// A field the IDL has, sent with another wire type, is skipped by the
// generated code like an unknown one: the guard walks it by its wire
// type. Only where the wire type is the IDL's list must the elements be
// the IDL's, and the refusal names the field.
func TestKnownFieldOfAnotherType(t *testing.T) {
	args := func(method string, field ...byte) []byte {
		b := thrift.Binary.AppendMessageBegin(nil, method, thrift.CALL, 1)
		b = append(b, byte(thrift.STRUCT), 0, 1)
		b = append(b, field...)
		return append(b, byte(thrift.STOP), byte(thrift.STOP))
	}
	for name, b := range map[string][]byte{
		"contributions as a set of strings":              args("ReportContributions", byte(thrift.SET), 0, 1, byte(thrift.STRING), 0, 0, 0, 1, 0, 0, 0, 1, 'x'),
		"MergeLatest's activity_id as a list of strings": args("MergeLatest", byte(thrift.LIST), 0, 1, byte(thrift.STRING), 0, 0, 0, 1, 0, 0, 0, 1, 'x'),
		"MergeLatest's records as a map":                 args("MergeLatest", byte(thrift.MAP), 0, 2, byte(thrift.I32), byte(thrift.STRING), 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0),
		"contribution as a list of i64":                  args("ReportContribution", byte(thrift.LIST), 0, 1, byte(thrift.I64), 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9),
	} {
		if err := CheckRequest(b); err != nil {
			t.Errorf("%s: refused: %v", name, err)
			continue
		}
		method, _, _, l, _ := thrift.Binary.ReadMessageBegin(b)
		if _, err := argsOf()[method].FastRead(b[l:]); err != nil {
			t.Errorf("%s: the generated code does not read it: %v", name, err)
		}
	}
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"contributions of strings": {typeConfused(), "ReportContributionsRequest field 1 (contributions): a list of Thrift type 11, where the IDL's holds Contribution structs"},
		"records of i64": {args("MergeLatest", byte(thrift.LIST), 0, 2, byte(thrift.I64), 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 9),
			"MergeLatestRequest field 2 (records): a list of Thrift type 10, where the IDL's holds ContributionRecord structs"},
	} {
		if err := CheckRequest(c.b); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// The guard knows each method's arguments as the IDL has them (methods):
// every field the generated code reads by the IDL's type, a struct or a
// list, is there, with the IDL's types, and no other; every method Kitex
// serves has its schema, named as its arguments struct. A new field, or
// a method, must be there before the guard takes it.
func TestSchemaIsTheIDLs(t *testing.T) {
	b, err := os.ReadFile("../../idl/combo.thrift")
	if err != nil {
		t.Fatal(err)
	}
	idl := regexp.MustCompile(`//[^\n]*`).ReplaceAllString(string(b), "")
	type idlField struct{ typ, name string }
	structs := map[string]map[int16]idlField{}
	for _, m := range regexp.MustCompile(`(?s)(?:struct|exception)\s+(\w+)\s*\{(.*?)\}`).FindAllStringSubmatch(idl, -1) {
		fields := map[int16]idlField{}
		for _, f := range regexp.MustCompile(`(\d+)\s*:\s*([\w<>, ]+?)\s+(\w+)\s*(?:,|;|\n|$)`).FindAllStringSubmatch(m[2], -1) {
			id, _ := strconv.Atoi(f[1])
			fields[int16(id)] = idlField{strings.ReplaceAll(f[2], " ", ""), f[3]}
		}
		if len(fields) == 0 {
			t.Fatalf("struct %s: no field found: the pattern is wrong", m[1])
		}
		structs[m[1]] = fields
	}
	base := map[string]thrift.TType{"bool": thrift.BOOL, "byte": thrift.BYTE, "i8": thrift.BYTE, "i16": thrift.I16,
		"i32": thrift.I32, "i64": thrift.I64, "double": thrift.DOUBLE, "string": thrift.STRING, "binary": thrift.STRING}

	var check func(s *schema, name string)
	check = func(s *schema, name string) {
		if s.name != name {
			t.Errorf("schema %s where the IDL has %s", s.name, name)
		}
		fields, ok := structs[name]
		if !ok {
			t.Errorf("%s: no such struct in the IDL", name)
			return
		}
		for id, f := range fields {
			known, ok := s.fields[id]
			elem := strings.TrimSuffix(strings.TrimPrefix(f.typ, "list<"), ">")
			switch {
			case base[f.typ] != 0:
				if ok {
					t.Errorf("%s field %d (%s): %s in the IDL, Thrift type %d in the schema", name, id, f.name, f.typ, known.t)
				}
			case structs[f.typ] != nil:
				if !ok || known.t != thrift.STRUCT || known.name != f.name {
					t.Errorf("%s field %d (%s): a struct %s in the IDL, not in the schema", name, id, f.name, f.typ)
				} else {
					check(known.of, f.typ)
				}
			case strings.HasPrefix(f.typ, "list<") && (base[elem] != 0 || structs[elem] != nil):
				switch {
				case !ok || known.t != thrift.LIST || known.name != f.name:
					t.Errorf("%s field %d (%s): a %s in the IDL, not in the schema", name, id, f.name, f.typ)
				case structs[elem] != nil && known.elem == thrift.STRUCT:
					check(known.of, elem)
				case base[elem] != known.elem:
					t.Errorf("%s field %d (%s): a %s in the IDL, of Thrift type %d in the schema", name, id, f.name, f.typ, known.elem)
				}
			default:
				// A set, a map, or a list of containers: the generated
				// code reads them by the IDL's types too, and walkKnown
				// checks lists of one level only.
				t.Errorf("%s field %d (%s): a %s, which the guard cannot check: teach walkKnown first", name, id, f.name, f.typ)
			}
		}
		for id := range s.fields {
			if _, ok := fields[id]; !ok {
				t.Errorf("%s field %d: in the schema, not in the IDL", name, id)
			}
		}
	}
	calls := regexp.MustCompile(`(?m)^\s*\w+\s+(\w+)\s*\(\s*(\d+)\s*:\s*(\w+)\s+(\w+)\s*\)`).FindAllStringSubmatch(idl, -1)
	if len(calls) == 0 {
		t.Fatal("no method found: the pattern is wrong")
	}
	for _, m := range calls {
		s, ok := methods[m[1]]
		if !ok {
			t.Errorf("method %s: no schema", m[1])
			continue
		}
		id, _ := strconv.Atoi(m[2])
		structs[s.name] = map[int16]idlField{int16(id): {m[3], m[4]}}
		check(s, s.name)
	}
	served := comboservice.NewServiceInfo().Methods
	if len(served) != len(methods) || len(calls) != len(methods) {
		t.Errorf("%d methods served, %d in the IDL, %d schemas", len(served), len(calls), len(methods))
	}
	for name, m := range served {
		if s, ok := methods[name]; !ok {
			t.Errorf("method %s: served, no schema", name)
		} else if got := fmt.Sprintf("%T", m.NewArgs()); got != "*combo."+s.name {
			t.Errorf("method %s: Kitex decodes a %s, the schema is %s's", name, got, s.name)
		}
	}
}

// decodeError is what the guarded codec says of the bytes b, a request
// as a server reads it, up to Kitex's decoding of the payload (nil: the
// guard lets it through).
func decodeError(b []byte) error {
	ri := rpcinfo.NewRPCInfo(rpcinfo.NewEndpointInfo("", "", nil, nil), rpcinfo.NewEndpointInfo("", "", nil, nil),
		rpcinfo.NewInvocation("", ""), rpcinfo.NewRPCConfig(), rpcinfo.NewRPCStats())
	msg := remote.NewMessage(nil, ri, remote.Call, remote.Server)
	g := newGuardedCodec(MaxAheadBytes, nil).(guardedCodec)
	g.meta = noPayloadDecoding{g.meta}
	return g.Decode(context.Background(), msg, remote.NewReaderBuffer(b))
}

// noPayloadDecoding stops before Kitex decodes the payload: that needs
// a server's service searcher.
type noPayloadDecoding struct{ remote.MetaDecoder }

func (noPayloadDecoding) DecodePayload(context.Context, remote.Message, remote.ByteBuffer) error {
	return nil
}

// ttHeader is a TTHeader frame of the given length field, with a 4-byte
// header (Thrift binary, no transform, padding), then payload.
func ttHeader(length uint32, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, length)
	b = append(b, 0x10, 0x00, 0, 0) // magic, flags
	b = binary.BigEndian.AppendUint32(b, 1)
	b = append(b, 0, 1)       // header size, in 4 bytes
	b = append(b, 0, 0, 0, 0) // protocol, transforms, padding
	return append(b, payload...)
}

// A request with no payload is refused saying why, by its transport: a
// malformed TTHeader or Framed one is not sent looking for an unframed
// client.
func TestNoPayloadSaysWhy(t *testing.T) {
	call := request("ReportContributions", batch(1))
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"a TTHeader frame shorter than its header": {ttHeader(10, call), "TTHeader frame shorter than its header (its length leaves -4 bytes"},
		"a TTHeader frame as long as its header":   {ttHeader(14, call), "TTHeader frame with nothing past its header"},
		"an empty Framed frame":                    {append([]byte{0, 0, 0, 0}, call...), "a Framed request whose frame is empty"},
		"an unframed request":                      {call, "takes framed requests only"},
	} {
		if err := decodeError(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", name, err, c.want)
		}
	}
	if err := decodeError(ttHeader(uint32(14+len(call)), call)); err != nil {
		t.Errorf("a valid TTHeader request: %v", err)
	}
}

// lineWriter passes each write (a log line) to a channel, dropping it if
// the channel is full.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) {
	select {
	case w <- string(p):
	default:
	}
	return len(p), nil
}

// A valid request that does not arrive whole within the read timeout is
// cut, and the log says it was the read timeout, and its value.
func TestSlowRequestIsCut(t *testing.T) {
	const timeout = 300 * time.Millisecond
	lines := make(lineWriter, 100)
	klog.SetOutput(lines)
	t.Cleanup(func() { klog.SetOutput(os.Stderr) })
	addr := serveWith(t, 100, MaxConnIdle, timeout)

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := request("ReportContributions", batch(1))
	start := time.Now()
	// The frame, and the request's first bytes only: the rest would come
	// after the timeout.
	if _, err := conn.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(call))), call[:20]...)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(start.Add(5 * time.Second))
	var one [1]byte
	if _, err := conn.Read(one[:]); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a request short of its bytes after %s: read %v, want the connection closed", time.Since(start), err)
	}
	if d := time.Since(start); d < timeout {
		t.Fatalf("cut after %s, before the read timeout (%s)", d, timeout)
	}
	want := fmt.Sprintf("%d bytes did not arrive within the read timeout (%s, rpcserver.ReadWriteTimeout)", len(call), timeout)
	for deadline := time.After(5 * time.Second); ; {
		select {
		case l := <-lines:
			if strings.Contains(l, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no log line says %q", want)
		}
	}
}

// batchWithExtra is a ReportContributions of n contributions, each with
// extra (a field the IDL does not have) before its STOP.
func batchWithExtra(n int, extra []byte) []byte {
	b := thrift.Binary.AppendMessageBegin(nil, "ReportContributions", thrift.CALL, 1)
	b = append(b, byte(thrift.STRUCT), 0, 1, byte(thrift.LIST), 0, 1, byte(thrift.STRUCT))
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	for _, c := range batch(n).Req.Contributions {
		body := make([]byte, c.BLength())
		c.FastWriteNocopy(body, nil)
		b = append(append(b, body[:len(body)-1]...), extra...)
		b = append(b, byte(thrift.STOP))
	}
	return append(b, byte(thrift.STOP), byte(thrift.STOP))
}

// A newer client's full batch, 1,000 contributions each with a small map,
// tags or a nested struct: the generated code decodes it whole, skipping
// the new fields, so the guard must take it. It refused it once the new
// fields' items, 20 per contribution, had spent the budget meant for what
// the generated code allocates.
func TestNewerClientsFullBatch(t *testing.T) {
	str := func(s string) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...) }
	m := append([]byte{byte(thrift.MAP), 0, 13, byte(thrift.STRING), byte(thrift.STRING)}, binary.BigEndian.AppendUint32(nil, 10)...)
	for range 10 {
		m = append(append(m, str("k")...), str("v")...)
	}
	tags := append([]byte{byte(thrift.LIST), 0, 15, byte(thrift.STRING)}, binary.BigEndian.AppendUint32(nil, 20)...)
	for range 20 {
		tags = append(tags, str("t")...)
	}
	nested := []byte{byte(thrift.STRUCT), 0, 14, byte(thrift.STRUCT), 0, 1, byte(thrift.I32), 0, 1, 0, 0, 0, 1, 0, 0}
	for name, extra := range map[string][]byte{"13: map<string,string> of 10": m, "15: list<string> of 20": tags, "14: a struct in a struct": nested} {
		b := batchWithExtra(validate.MaxBatch, extra)
		_, _, _, off, _ := thrift.Binary.ReadMessageBegin(b)
		var args combo.ComboServiceReportContributionsArgs
		if _, err := args.FastRead(b[off:]); err != nil || len(args.Req.GetContributions()) != validate.MaxBatch {
			t.Fatalf("%s: the generated code: %v, %d contributions", name, err, len(args.Req.GetContributions()))
		}
		if err := CheckRequest(b); err != nil {
			t.Errorf("%s: a batch of %d the generated code decodes whole, refused: %v", name, validate.MaxBatch, err)
		}
	}
}

// A peer that sends more than maxAhead bytes of requests before the answer
// to the one being decoded has its connection closed, unanswered: netpoll
// held every byte such a peer sent until it was decoded, a gigabyte in
// seconds on one connection. Requests sent ahead within the bound (a
// multiplexing client's) are answered in turn, and a client that waits for
// each answer is served on one connection as before.
func TestRequestsSentAheadAreBounded(t *testing.T) {
	addr := serveAhead(t, 100, MaxConnIdle, ReadWriteTimeout, 1024)
	payload := request("ReportContributions", batch(2))
	frame := append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
	if len(frame) > 512 {
		t.Fatalf("a frame of %d bytes: two would pass the 1024 bytes sent ahead", len(frame))
	}
	replies := func(data []byte, want int) int {
		t.Helper()
		return repliesTo(t, addr, data, want)
	}
	if n := replies(append(append([]byte(nil), frame...), frame...), 2); n != 2 {
		t.Errorf("two requests sent together, within the bound: %d replies, want 2", n)
	}
	// 2 KB past the first request: refused, and the connection closed.
	if n := replies(append(append([]byte(nil), frame...), make([]byte, 2048)...), 1); n != 0 {
		t.Errorf("a request with 2 KB sent after it: %d replies, want none", n)
	}

	// One request at a time on one connection, as a pooled Kitex client sends.
	conn := dialSend(t, addr, frame)
	defer conn.Close()
	for i := range 3 {
		if i > 0 {
			if _, err := conn.Write(frame); err != nil {
				t.Fatal(err)
			}
		}
		answer, err := readAnswer(conn)
		if err != nil {
			t.Fatalf("request %d of one at a time: %v", i+1, err)
		}
		if _, typ, _, _, err := thrift.Binary.ReadMessageBegin(answer); err != nil || typ != thrift.REPLY {
			t.Fatalf("request %d of one at a time answered %q, want a reply", i+1, answer)
		}
	}
}

// A multiplexing Kitex client (WithMuxConnection, deprecated but taken by
// client.NewClient's options) sends its concurrent calls ahead on one
// connection; the service's own bound serves them all, as before the bound.
func TestMuxClientIsServed(t *testing.T) {
	addr := serve(t, 100)
	cli, err := client.NewClient([]string{addr}, kclient.WithMuxConnection(1))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for range 8 {
		wg.Go(func() {
			for range 25 {
				if _, err := cli.ReportContributions(context.Background(), batch(2).Req); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of 200 calls failed, the first: %v", n, firstErr.Load())
	}
}

// repliesTo sends data to addr on a new connection in one write and
// counts the replies, up to want, until the connection ends.
func repliesTo(t *testing.T, addr string, data []byte, want int) int {
	t.Helper()
	conn := dialSend(t, addr, data)
	defer conn.Close()
	n := 0
	for n < want {
		answer, err := readAnswer(conn)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("the connection stayed open")
		}
		if err != nil {
			break
		}
		if _, typ, _, _, err := thrift.Binary.ReadMessageBegin(answer); err == nil && typ == thrift.REPLY {
			n++
		}
	}
	return n
}

// The largest valid request, a MergeLatest of MaxMergeRecords rows with
// every string at its bound (about 47 MB), is within MaxRequestBytes and
// passes the guard: a smaller bound would refuse a caller the contract
// allows, as a protocol error, its connection closed.
func TestLargestValidRequestIsTaken(t *testing.T) {
	// One string per bound, shared by every row: only the encoded request
	// is ~47 MB, not the rows as well (RSS 335 MB -> 200 MB under -race).
	name, url, itemType := strings.Repeat("a", validate.MaxName), strings.Repeat("a", validate.MaxURL), strings.Repeat("a", validate.MaxItemType)
	req := &combo.MergeLatestRequest{ActivityId: 7, Limit: 0, Records: make([]*combo.ContributionRecord, 0, validate.MaxMergeRecords)}
	for i := range validate.MaxMergeRecords {
		req.Records = append(req.Records, &combo.ContributionRecord{Id: int64(i + 1), UserId: 42, Nickname: name,
			AvatarUrl: url, StarId: 9, ItemId: 3, ItemType: itemType, ItemName: name,
			ItemIcon: url, Quantity: validate.MaxQuantity, ComboCount: 1, CreatedAt: 1732950000000})
	}
	if err := validate.MergeLatest(req); err != nil {
		t.Fatalf("not the largest valid request: %v", err)
	}
	b := request("MergeLatest", &combo.ComboServiceMergeLatestArgs{Req: req})
	if len(b) > MaxRequestBytes {
		t.Fatalf("the largest valid request is %d bytes, past MaxRequestBytes (%d)", len(b), MaxRequestBytes)
	}
	if err := CheckRequest(b); err != nil {
		t.Fatalf("the largest valid request (%d bytes): refused: %v", len(b), err)
	}
}

// nestedLists is a MergeLatest whose arguments hold a field the IDL does
// not have (id 99): k lists nested in one another, each holding the next,
// the innermost empty.
func nestedLists(k int) []byte {
	b := thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1)
	b = append(b, byte(thrift.LIST), 0, 99)
	for i := range k {
		elem, n := thrift.LIST, uint32(1)
		if i == k-1 {
			elem, n = thrift.I32, 0
		}
		b = append(b, byte(elem))
		b = binary.BigEndian.AppendUint32(b, n)
	}
	return append(b, byte(thrift.STOP))
}

// Lists, sets and maps nest within the same 16 levels as structs (the
// arguments struct is the first): a level that did not count would let a
// request of lists nested millions deep, 5 bytes a level, recurse the
// guard past the goroutine's stack bound, a fatal error no recover
// catches.
func TestNestedListsAreBoundedLikeStructs(t *testing.T) {
	if err := CheckRequest(nestedLists(15)); err != nil {
		t.Errorf("16 levels (the arguments and 15 lists): refused: %v", err)
	}
	for _, k := range []int{16, 100} {
		if err := CheckRequest(nestedLists(k)); err == nil || !strings.Contains(err.Error(), "nested too deep") {
			t.Errorf("%d levels (the arguments and %d lists): %v, want nested too deep", k+1, k, err)
		}
	}
}

// The IDL's own levels count too: the arguments, the request, its list
// and the list's Contribution are four of the 16, so a Contribution may
// hold structs the IDL does not have nested 12 deep, not 13.
func TestIDLsLevelsCountInTheNesting(t *testing.T) {
	item := func(k int) []byte {
		b := thrift.Binary.AppendMessageBegin(nil, "ReportContributions", thrift.CALL, 1)
		b = append(b, byte(thrift.STRUCT), 0, 1, byte(thrift.LIST), 0, 1, byte(thrift.STRUCT), 0, 0, 0, 1)
		for range k {
			b = append(b, byte(thrift.STRUCT), 0, 99)
		}
		for range k + 3 { // the nested structs, the Contribution, the request, the arguments
			b = append(b, byte(thrift.STOP))
		}
		return b
	}
	if err := CheckRequest(item(12)); err != nil {
		t.Errorf("a Contribution holding 12 nested structs (16 levels): refused: %v", err)
	}
	if err := CheckRequest(item(13)); err == nil || !strings.Contains(err.Error(), "nested too deep") {
		t.Errorf("a Contribution holding 13 nested structs (17 levels): %v, want nested too deep", err)
	}
}

// A newer client's field that is a list of maps is walked and let
// through, as the generated code skips it: a map is a Thrift type.
func TestNewerClientsListOfMapsIsTaken(t *testing.T) {
	b := thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1)
	b = append(b, byte(thrift.LIST), 0, 99, byte(thrift.MAP), 0, 0, 0, 1, // one map
		byte(thrift.I32), byte(thrift.I32), 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 8, // {7: 8}
		byte(thrift.STOP))
	if err := CheckRequest(b); err != nil {
		t.Fatalf("a list of maps the IDL does not have: refused: %v", err)
	}
	_, _, _, l, _ := thrift.Binary.ReadMessageBegin(b)
	if _, err := argsOf()["MergeLatest"].FastRead(b[l:]); err != nil {
		t.Fatalf("the generated code does not read it either: %v", err)
	}
}
