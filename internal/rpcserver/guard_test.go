package rpcserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cloudwego/gopkg/protocol/thrift"
	kclient "github.com/cloudwego/kitex/client"
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
		"a set": append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1),
			byte(thrift.STRUCT), 0, 1, byte(thrift.SET), 0, 9, byte(thrift.I32), 0, 0, 0, 1, 0, 0, 0, 7, 0, 0),
		"a map": append(thrift.Binary.AppendMessageBegin(nil, "MergeLatest", thrift.CALL, 1),
			byte(thrift.STRUCT), 0, 1, byte(thrift.MAP), 0, 9, byte(thrift.I32), byte(thrift.I32), 0, 0, 0, 0, 0, 0),
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	svr := comboservice.NewServer(&okService{}, append(options(prometheus.NewRegistry(), maxConns, idle),
		server.WithListener(ln), StopOn(ctx))...)
	done := make(chan error, 1)
	go func() { done <- svr.Run() }()
	t.Cleanup(func() { stop(); <-done })
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

// Every list in the IDL holds structs, and it has no set and no map: the
// check refuses any other container, since the generated code would read
// it by the IDL's type, not the wire's (guardedCodec). A new field with
// another container type must change the check first.
func TestIDLListsHoldStructs(t *testing.T) {
	b, err := os.ReadFile("../../idl/combo.thrift")
	if err != nil {
		t.Fatal(err)
	}
	idl := string(b)
	if strings.Contains(idl, "set<") || strings.Contains(idl, "map<") {
		t.Fatal("the IDL has a set or a map: walk refuses them")
	}
	structs := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:struct|exception)\s+(\w+)`).FindAllStringSubmatch(idl, -1) {
		structs[m[1]] = true
	}
	lists := regexp.MustCompile(`list<\s*(\w+)\s*>`).FindAllStringSubmatch(idl, -1)
	if len(lists) == 0 {
		t.Fatal("no list found: the pattern is wrong")
	}
	for _, m := range lists {
		if !structs[m[1]] {
			t.Errorf("list<%s>: not a struct of the IDL, and walk refuses lists of anything else", m[1])
		}
	}
}
