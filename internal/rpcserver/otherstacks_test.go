package rpcserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cloudwego/gopkg/protocol/thrift"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/codec"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
)

// Requests of other Thrift stacks' protocols and transports that Kitex does
// not serve are refused saying what they are, so that the caller's team,
// which sees only its connection end, can be told from the log. Each
// starts as an Apache Thrift 0.17 client's ReportContribution does (its
// first 8 bytes are those the service logged for one): Kitex's own
// refusal is "invalid payload (first4Bytes=0x…, second4Bytes=0x…)".
func TestOtherThriftStacksAreToldWhy(t *testing.T) {
	name := "ReportContribution"
	// Compact: protocol id 0x82, version 1 | CALL<<5, varint seq 1, varint name length, name; then an empty args struct.
	compact := append([]byte{0x82, 0x21, 0x01, byte(len(name))}, name...)
	compact = append(compact, 0x00)
	// Non-strict binary: name length, name, type byte CALL, seq 1; then an empty args struct.
	nonStrict := binary.BigEndian.AppendUint32(nil, uint32(len(name)))
	nonStrict = append(nonStrict, name...)
	nonStrict = append(nonStrict, 1, 0, 0, 0, 1, 0)
	// Apache Thrift's TMultiplexedProtocol names the method service:method,
	// a name longer than any of the service's own.
	multiplexed := "ComboService:" + name + "s"
	nonStrictMux := binary.BigEndian.AppendUint32(nil, uint32(len(multiplexed)))
	nonStrictMux = append(nonStrictMux, multiplexed...)
	nonStrictMux = append(nonStrictMux, 1, 0, 0, 0, 1, 0)
	framed := func(p []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(p))), p...) }
	// Apache/fbthrift THeader: magic 0x0FFF, flags, seq, header size 1 (4 bytes): protocol 0 (binary), no transforms.
	theader := func(p []byte) []byte {
		b := []byte{0x0f, 0xff, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0}
		return framed(append(b, p...))
	}
	for label, c := range map[string]struct {
		b    []byte
		want string
	}{
		"Framed Compact":                  {framed(compact), "Framed Thrift Compact"},
		"unframed Compact":                {compact, "Thrift Compact request (unframed"},
		"TTHeader with Compact":           {ttHeader(uint32(14+len(compact)), compact), "Thrift Compact request (unframed, or in a TTHeader"},
		"Framed non-strict":               {framed(nonStrict), "Framed non-strict"},
		"unframed non-strict":             {nonStrict, "unframed non-strict"},
		"Framed non-strict multiplexed":   {framed(nonStrictMux), "Framed non-strict"},
		"unframed non-strict multiplexed": {nonStrictMux, "unframed non-strict"},
		"Apache/fbthrift THeader":         {theader(request(name, batch(1))), "THeader"},
	} {
		err := decodeError(c.b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: refused with %v, want it to say %q", label, err, c.want)
			continue
		}
		// Kitex's own words stay: its first bytes are what the caller's
		// team matches against its client's output.
		if kitex := kitexDecodeError(c.b); kitex == nil || !strings.Contains(err.Error(), kitex.Error()) {
			t.Errorf("%s: refused with %v, want Kitex's refusal %v kept in it", label, err, kitex)
		}
	}
}

// What is no Thrift is refused as before, not named as some Thrift.
func TestNonThriftIsNotNamedAsThrift(t *testing.T) {
	for label, b := range map[string][]byte{
		"HTTP/2 preface":   []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
		"telnet interrupt": {0xff, 0xf4, 0xff, 0xfd, 0, 0, 0, 0},
		"TLS client hello": {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03},
		"a frame of noise": {0, 0, 0, 8, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4},
	} {
		err := decodeError(b)
		if err == nil {
			t.Errorf("%s: taken", label)
			continue
		}
		for _, word := range []string{"Compact", "strict", "THeader"} {
			if strings.Contains(err.Error(), word) {
				t.Errorf("%s: refused as %v, naming %s", label, err, word)
			}
		}
	}
}

// A multiplexing client's method name (service:method) is answered as an
// unknown method is, with Kitex's TApplicationException type 20, as README
// tells callers of other stacks.
func TestMultiplexedNameIsAnsweredType20(t *testing.T) {
	addr := serve(t, 100)
	answer := call(t, addr, request("ComboService:ReportContributions", batch(1)))
	if _, typ, _, _, _ := thrift.Binary.ReadMessageBegin(answer); typ != thrift.EXCEPTION ||
		!bytes.Contains(answer, []byte{byte(thrift.I32), 0, 2, 0, 0, 0, 20}) {
		t.Fatalf("a multiplexed name answered %q, want a TApplicationException of type 20", answer)
	}
	if err := report(addr); err != nil {
		t.Fatalf("after a multiplexed name: the server no longer serves: %v", err)
	}
}

// An HTTP request (a probe or scraper given server.addr) is refused saying
// so and where the HTTP endpoints are.
func TestHTTPRequestIsToldWhereMetricsAre(t *testing.T) {
	for _, req := range []string{"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "HEAD /readyz HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "OPTIONS * HTTP/1.1\r\n\r\n"} {
		err := decodeError([]byte(req))
		if err == nil || !strings.Contains(err.Error(), "an HTTP request") || !strings.Contains(err.Error(), "metrics.addr") {
			t.Errorf("%q refused with %v, want it named an HTTP request, metrics.addr named", req[:12], err)
		}
	}
}

// kitexDecodeError is Kitex's own refusal of b, by the codec the guard
// wraps.
func kitexDecodeError(b []byte) error {
	ri := rpcinfo.NewRPCInfo(rpcinfo.NewEndpointInfo("", "", nil, nil), rpcinfo.NewEndpointInfo("", "", nil, nil),
		rpcinfo.NewInvocation("", ""), rpcinfo.NewRPCConfig(), rpcinfo.NewRPCStats())
	msg := remote.NewMessage(nil, ri, remote.Call, remote.Server)
	meta := codec.NewDefaultCodecWithSizeLimit(MaxRequestBytes).(remote.MetaDecoder)
	return meta.DecodeMeta(context.Background(), msg, remote.NewReaderBuffer(b))
}
