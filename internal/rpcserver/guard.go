package rpcserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudwego/gopkg/protocol/thrift"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/codec"
	"github.com/cloudwego/kitex/pkg/remote/codec/perrors"
	"github.com/cloudwego/kitex/transport"
	"github.com/cloudwego/netpoll"

	"github.com/combo-service/combo-service/validate"
)

// Bounds on what a request may hold before Kitex decodes it.
const (
	// MaxRequestBytes bounds a request's payload. The largest valid one, a
	// MergeLatest of 10,000 rows with every string at its bound, is about
	// 47 MB; a ReportContributions of 1,000 such items about 5 MB.
	MaxRequestBytes = 64 << 20
	// MaxContainerItems bounds the items of all the IDL's lists in a
	// request together (what the generated code allocates; a field it
	// skips is bounded by its bytes alone). A valid request has one list, at most
	// MergeLatest's 10,000 records; twice that lets a request a little
	// over its bound reach the handler, whose INVALID_ARGUMENT names the
	// field (the contract's error), while the decoding stays small. Per list alone, a struct
	// repeating its list field thousands of times made the generated code
	// allocate each copy (an empty struct is a byte on the wire, 144 in
	// memory): 9 GB for a 64 MB request. The same budget, on its own,
	// bounds struct fields: the generated code allocates a struct for each
	// copy of a repeated one too (four bytes on the wire each: 2.3 GB and
	// 0.9 s for 64 MB), and a valid request has at most two.
	MaxContainerItems = 2 * validate.MaxMergeRecords
	// MaxAheadBytes bounds the bytes of requests a connection may send
	// before the one being decoded is answered (guardedCodec): one
	// request's bound, room for a multiplexing client's concurrent calls.
	MaxAheadBytes = MaxRequestBytes
	// maxDepth bounds nesting: the IDL nests three structs deep.
	maxDepth = 16
)

// guardedCodec is Kitex's default codec with a payload size limit, and
// with each request's bytes checked before Kitex's generated code decodes
// them. That code sizes a list from its header alone: a 49-byte request
// whose list claims 2^31 items made it allocate some 300 GB, a fatal
// error no recover catches, and the process died. Here every length is
// checked against the bytes actually there, and every list against
// MaxContainerItems, without allocating; a request that fails is refused
// as a protocol error, before anything is decoded.
//
// The generated code reads a list field of the IDL by the IDL's element
// type, whatever the wire says: a list<string> on the wire, read as the
// IDL's list<struct>, would make it read other bytes than the check, and
// a list header the check never saw. So the check knows each method's
// arguments as the IDL has them (methods): such a list must hold the
// IDL's element type. Any other field, a newer client's included, the
// generated code skips by its wire type, and the check walks it by its
// wire type too, whatever lists, sets or maps it holds: every length
// within the bytes, every type byte Thrift's, the same depth bound; the
// item budgets are for what the generated code allocates, which skipping
// does not.
//
// A connection holds at most maxAhead bytes of requests sent ahead, before
// the one being decoded is answered: past that, the request is refused and
// the connection closed. netpoll reads whatever a peer sends while a
// request runs, and holds it until it is decoded: a peer sending requests
// back to back without waiting for answers (8 MB batches, each within
// every bound here) grew the heap by a gigabyte in 6 s on one connection.
// Now what it can make the server hold is maxAhead, plus what arrives
// while one request runs, up to unreadCloser's bound (a request and
// maxAhead, at any time), then its connection is gone. A pooled Kitex client (client.NewClient's)
// sends nothing ahead; a multiplexing one (Kitex's deprecated
// WithMuxConnection) sends its concurrent calls ahead on one connection,
// and is served one call at a time as before, within the bound.
//
// Only framed requests (TTHeader, as client.NewClient sends, or Framed)
// are taken: an unframed one's size is known only once it has been read
// whole, so it could be neither bounded nor checked first.
type guardedCodec struct {
	inner    remote.Codec
	meta     remote.MetaDecoder
	maxAhead int
	large    *inFlight // nil: no budget
}

// newGuardedCodec returns the guarded default codec, refusing a request
// whose connection holds more than maxAhead bytes past it, and admitting
// large requests within large's budget.
func newGuardedCodec(maxAhead int, large *inFlight) remote.Codec {
	inner := codec.NewDefaultCodecWithSizeLimit(MaxRequestBytes)
	return guardedCodec{inner: inner, meta: inner.(remote.MetaDecoder), maxAhead: maxAhead, large: large}
}

const errUnframed = "combo-service takes framed requests only (TTHeader or Framed transport): " +
	"an unframed request's size is known only once it is read"

// noPayload says why a request of payload length n (0 or less) has no
// payload to check, by its transport (which DecodeMeta has set): only an
// unframed one is not known to have any. A TTHeader frame's payload length
// is what its length leaves past its header, negative for a malformed one.
func noPayload(msg remote.Message, n int) string {
	switch tp := msg.RPCInfo().Config().TransportProtocol(); {
	case tp&transport.Framed != 0:
		return "combo-service: a Framed request whose frame is empty (length 0)"
	case tp&transport.TTHeader != 0 && n < 0:
		return fmt.Sprintf("combo-service: a TTHeader frame shorter than its header "+
			"(its length leaves %d bytes for the payload)", n)
	case tp&transport.TTHeader != 0:
		return "combo-service: a TTHeader frame with nothing past its header"
	}
	return errUnframed
}

func (g guardedCodec) Encode(ctx context.Context, msg remote.Message, out remote.ByteBuffer) error {
	return g.inner.Encode(ctx, msg, out)
}

func (g guardedCodec) Decode(ctx context.Context, msg remote.Message, in remote.ByteBuffer) error {
	if err := g.DecodeMeta(ctx, msg, in); err != nil {
		return err
	}
	return g.DecodePayload(ctx, msg, in)
}

func (g guardedCodec) Name() string { return "combo-guarded" }

// DecodeMeta reads the transport's header (and the payload's size). A
// request another Thrift stack sent in a protocol Kitex does not take is
// refused naming it.
func (g guardedCodec) DecodeMeta(ctx context.Context, msg remote.Message, in remote.ByteBuffer) error {
	err := g.meta.DecodeMeta(ctx, msg, in)
	if err == nil {
		return nil
	}
	if what := refusedProtocol(firstBytes(in)); what != "" {
		kind := perrors.UnknownProtocolError
		if pe, ok := err.(perrors.ProtocolError); ok {
			kind = pe.TypeId()
		}
		return perrors.NewProtocolErrorWithType(kind, what+" ("+err.Error()+")")
	}
	return err
}

// DecodePayload checks the payload, then lets Kitex decode it.
func (g guardedCodec) DecodePayload(ctx context.Context, msg remote.Message, in remote.ByteBuffer) error {
	n := msg.PayloadLen()
	if n <= 0 {
		return perrors.NewProtocolErrorWithType(perrors.InvalidData, noPayload(msg, n))
	}
	readTimeout := msg.RPCInfo().Config().ReadWriteTimeout()
	if n >= LargeRequestBytes && g.large != nil {
		// Room for a large request is taken once its bytes are all here,
		// not on its header's word (8 bytes claiming 64 MiB held that
		// much room for the read timeout), and before it is peeked:
		// peeking it makes netpoll copy it whole into one slice, and
		// decoding and answering it hold as much again. Given back when
		// its RPC ends, however it ends.
		if !arrived(in, n, readTimeout) {
			return perrors.NewProtocolErrorWithErrMsg(netpoll.ErrReadTimeout, readTimedOut(n, readTimeout)+
				", or its peer hung up before sending it all")
		}
		if err := g.large.admit(msg.RPCInfo(), n); err != nil {
			return perrors.NewProtocolErrorWithType(perrors.InvalidData, "combo-service: request refused: "+err.Error())
		}
	}
	buf, err := in.Peek(n)
	if errors.Is(err, netpoll.ErrReadTimeout) {
		return perrors.NewProtocolErrorWithErrMsg(err, readTimedOut(n, readTimeout)+": "+err.Error())
	}
	if err != nil {
		return perrors.NewProtocolErrorWithErrMsg(err, "combo-service: read the request: "+err.Error())
	}
	if err := CheckRequest(buf); err != nil {
		return perrors.NewProtocolErrorWithType(perrors.InvalidData, "combo-service: request refused before decoding: "+err.Error())
	}
	if ahead := in.ReadableLen() - n; ahead > g.maxAhead {
		return perrors.NewProtocolErrorWithType(perrors.InvalidData, fmt.Sprintf("combo-service: request refused: "+
			"%d bytes of further requests came on its connection before it was answered, more than the %d "+
			"a connection may send ahead", ahead, g.maxAhead))
	}
	return g.meta.DecodePayload(ctx, msg, in)
}

func readTimedOut(n int, timeout time.Duration) string {
	return fmt.Sprintf("combo-service: read the request: %d bytes did not arrive within the read timeout "+
		"(%s, rpcserver.ReadWriteTimeout)", n, timeout)
}

// arrived waits until in holds n bytes, without copying them (a Peek of
// bytes spread over netpoll's buffers copies them into one slice), and
// says whether they came within timeout. netpoll reads what the peer
// sends by itself; this polls, for large requests only, after 1 ms, then
// twice as long each time up to 100 ms: a request coming at a data
// centre's speed is seen within about its own time, while thousands of
// headers sent alone cost little CPU (polled every 5 ms, 4000 of them
// took a core). It cannot tell a peer that hung up: that one is let go at
// the timeout, as one that stalled.
func arrived(in remote.ByteBuffer, n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; in.ReadableLen() < n; wait = min(2*wait, 100*time.Millisecond) {
		if timeout > 0 && time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
	}
	return true
}

// CheckRequest walks a Thrift binary message (its header and its
// arguments struct) without decoding it: every length must fit in buf,
// the IDL's lists hold at most MaxContainerItems items in all, the IDL's
// struct fields are at most as many, every type byte is one of Thrift's,
// and each field the generated code reads by the IDL's type (the
// method's schema) has that type's elements on the wire.
func CheckRequest(buf []byte) error {
	name, _, _, l, err := thrift.Binary.ReadMessageBegin(buf)
	if err != nil {
		return err
	}
	b := budget{items: MaxContainerItems, structs: MaxContainerItems}
	// A method the service does not have gets no schema, every field
	// walked by its wire type: Kitex refuses it by its name, answering an
	// exception, without decoding its arguments.
	_, err = walk(buf[l:], thrift.STRUCT, methods[name], maxDepth, &b)
	return err
}

// A schema is what the guard must know of one struct of the IDL: its
// fields that the generated code reads by the IDL's type, not the
// wire's. Those are its struct fields, read with their struct's schema,
// and its lists, read by the IDL's element type. Any other field, and a
// known one whose wire type is not the IDL's, the generated code skips
// by its wire type (thrift.Binary.Skip), allocating nothing: a newer
// client's fields are walked by their wire type, whatever it is.
type schema struct {
	name   string
	fields map[int16]field
}

type field struct {
	name string
	t    thrift.TType // STRUCT, or LIST
	elem thrift.TType // a LIST's element type
	of   *schema      // the STRUCT's, or the LIST's structs'
}

// methods are the schemas of the service's arguments structs, by method
// name, as Kitex picks the arguments struct (TestSchemaIsTheIDLs).
var methods = func() map[string]*schema {
	contribution := &schema{name: "Contribution"}
	record := &schema{name: "ContributionRecord"}
	args := func(method string, req *schema) *schema {
		return &schema{name: "ComboService" + method + "Args", fields: map[int16]field{
			1: {name: "req", t: thrift.STRUCT, of: req}}}
	}
	return map[string]*schema{
		"ReportContribution": args("ReportContribution", &schema{name: "ReportContributionRequest", fields: map[int16]field{
			1: {name: "contribution", t: thrift.STRUCT, of: contribution}}}),
		"ReportContributions": args("ReportContributions", &schema{name: "ReportContributionsRequest", fields: map[int16]field{
			1: {name: "contributions", t: thrift.LIST, elem: thrift.STRUCT, of: contribution}}}),
		"MergeLatest": args("MergeLatest", &schema{name: "MergeLatestRequest", fields: map[int16]field{
			2: {name: "records", t: thrift.LIST, elem: thrift.STRUCT, of: record}}}),
	}
}()

// budget counts down what the generated code may still allocate for a
// request: items of the IDL's lists, and struct values that are the IDL's
// fields (a list's structs are its items).
type budget struct{ items, structs int }

func (b *budget) take(n int) error {
	if b.items -= n; b.items < 0 {
		return fmt.Errorf("lists of more than %d items in all", MaxContainerItems)
	}
	return nil
}

// walk checks one value of type t at the start of b, a struct with
// schema s (nil: none known), and returns its size.
func walk(b []byte, t thrift.TType, s *schema, depth int, left *budget) (int, error) {
	if depth == 0 {
		return 0, errors.New("nested too deep")
	}
	switch t {
	case thrift.STRUCT:
		off := 0
		for {
			ft, id, l, err := thrift.Binary.ReadFieldBegin(b[off:])
			if err != nil {
				return 0, err
			}
			off += l
			if ft == thrift.STOP {
				return off, nil
			}
			var n int
			switch f, ok := s.field(id); {
			case ok && f.t == ft:
				// The generated code allocates a struct for each copy of
				// a known struct field, and a list's items: these spend
				// the budget. A field it skips allocates nothing, and is
				// bounded by its bytes alone.
				if ft == thrift.STRUCT {
					if left.structs--; left.structs < 0 {
						return 0, fmt.Errorf("more than %d struct fields in all", MaxContainerItems)
					}
				}
				n, err = walkKnown(b[off:], s, id, f, depth-1, left)
			case ft == thrift.STRING || ft == thrift.I64 || ft == thrift.I32:
				// Most fields of a valid request: Skip checks them, here
				// without a call of walk (a third of the check's time).
				n, err = thrift.Binary.Skip(b[off:], ft)
			default:
				n, err = walk(b[off:], ft, nil, depth-1, left)
			}
			if err != nil {
				return 0, err
			}
			off += n
		}
	case thrift.LIST:
		et, size, l, err := thrift.Binary.ReadListBegin(b)
		if err != nil {
			return 0, err
		}
		return walkItems(b, l, size, []thrift.TType{et}, depth, left)
	case thrift.SET:
		et, size, l, err := thrift.Binary.ReadSetBegin(b)
		if err != nil {
			return 0, err
		}
		return walkItems(b, l, size, []thrift.TType{et}, depth, left)
	case thrift.MAP:
		kt, vt, size, l, err := thrift.Binary.ReadMapBegin(b)
		if err != nil {
			return 0, err
		}
		return walkItems(b, l, size, []thrift.TType{kt, vt}, depth, left)
	case thrift.BOOL, thrift.BYTE, thrift.I16, thrift.I32, thrift.I64, thrift.DOUBLE, thrift.STRING:
		// Skip checks their length against b.
		return thrift.Binary.Skip(b, t)
	default:
		// Not Thrift (isType): Skip must not see it.
		return 0, fmt.Errorf("a value of Thrift type %d: no such type", t)
	}
}

// isType says whether t is a type a value may have: any other type byte
// is not Thrift (UUID, 16, Skip refuses too). Skip must not see one: it
// indexes a table by the type, a signed byte, so one of 0x80 or more
// panicked (index out of range); Kitex recovered, but logged a stack
// trace for every such 20-byte request. The generated code's Skip of an
// unknown field would panic the same way, for a container's element type
// even with no items.
func isType(t thrift.TType) bool {
	switch t {
	case thrift.BOOL, thrift.BYTE, thrift.I16, thrift.I32, thrift.I64, thrift.DOUBLE, thrift.STRING,
		thrift.STRUCT, thrift.LIST, thrift.SET, thrift.MAP:
		return true
	}
	return false
}

// walkItems checks the size items of a list, set or map whose header, l
// bytes, starts b: each item is one value of each of types in turn.
func walkItems(b []byte, l, size int, types []thrift.TType, depth int, left *budget) (int, error) {
	for _, t := range types {
		if !isType(t) {
			return 0, fmt.Errorf("a list, set or map of Thrift type %d: no such type", t)
		}
	}
	// No budget spent: the generated code skips these (they are never a
	// known list, which walkKnown reads), allocating nothing, and each
	// item is at least a byte of the request, so its size bounds the walk.
	off := l
	for range size {
		for _, t := range types {
			n, err := walk(b[off:], t, nil, depth-1, left)
			if err != nil {
				return 0, err
			}
			off += n
		}
	}
	return off, nil
}

// walkKnown checks field id of struct s, f, whose wire type is the IDL's:
// the generated code reads it by the IDL's type.
func walkKnown(b []byte, s *schema, id int16, f field, depth int, left *budget) (int, error) {
	if f.t == thrift.STRUCT {
		return walk(b, thrift.STRUCT, f.of, depth, left)
	}
	et, size, l, err := thrift.Binary.ReadListBegin(b)
	if err != nil {
		return 0, err
	}
	// The generated code reads the list's items by the IDL's element type
	// whatever the wire says: a list<string> on the wire, read as the
	// IDL's list<struct>, would make it read other bytes than the check,
	// and a list header the check never saw (a review's 300 GB bypass).
	if et != f.elem {
		return 0, fmt.Errorf("%s field %d (%s): a list of Thrift type %d, where the IDL's holds %s",
			s.name, id, f.name, et, f.elemName())
	}
	if err := left.take(size); err != nil {
		return 0, err
	}
	off := l
	for range size {
		n, err := walk(b[off:], et, f.of, depth-1, left)
		if err != nil {
			return 0, err
		}
		off += n
	}
	return off, nil
}

// elemName names a list field's element type, as the IDL does.
func (f field) elemName() string {
	if f.elem == thrift.STRUCT {
		return f.of.name + " structs"
	}
	return fmt.Sprintf("Thrift type %d", f.elem)
}

// field is s's field id the generated code reads by the IDL's type.
func (s *schema) field(id int16) (field, bool) {
	if s == nil {
		return field{}, false
	}
	f, ok := s.fields[id]
	return f, ok
}
