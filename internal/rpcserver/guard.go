package rpcserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudwego/gopkg/protocol/thrift"
	"github.com/cloudwego/kitex/pkg/remote"
	"github.com/cloudwego/kitex/pkg/remote/codec"
	"github.com/cloudwego/kitex/pkg/remote/codec/perrors"

	"github.com/combo-service/combo-service/validate"
)

// Bounds on what a request may hold before Kitex decodes it.
const (
	// MaxRequestBytes bounds a request's payload. The largest valid one, a
	// MergeLatest of 10,000 rows with every string at its bound, is about
	// 47 MB; a ReportContributions of 1,000 such items about 5 MB.
	MaxRequestBytes = 64 << 20
	// MaxContainerItems bounds the items of all the lists in a request
	// together. A valid request has one list, at most MergeLatest's 10,000
	// records; twice that lets a request a little over its bound reach the
	// handler, whose INVALID_ARGUMENT names the field (the contract's
	// error), while the decoding stays small. Per list alone, a struct
	// repeating its list field thousands of times made the generated code
	// allocate each copy (an empty struct is a byte on the wire, 144 in
	// memory): 9 GB for a 64 MB request. The same budget, on its own,
	// bounds struct fields: the generated code allocates a struct for each
	// copy of a repeated one too (four bytes on the wire each: 2.3 GB and
	// 0.9 s for 64 MB), and a valid request has at most two.
	MaxContainerItems = 2 * validate.MaxMergeRecords
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
// The check reads lists by the element type on the wire, and the
// generated code by the IDL's: a list<string> on the wire, read as the
// IDL's list<struct>, would make the two read different bytes, and the
// code a list header the check never saw. Every list in the IDL holds
// structs, and it has no set and no map (TestIDLListsHoldStructs), so a
// request with any other container is refused.
//
// Only framed requests (TTHeader, as client.NewClient sends, or Framed)
// are taken: an unframed one's size is known only once it has been read
// whole, so it could be neither bounded nor checked first.
type guardedCodec struct {
	inner remote.Codec
	meta  remote.MetaDecoder
}

// newGuardedCodec returns the guarded default codec.
func newGuardedCodec() remote.Codec {
	inner := codec.NewDefaultCodecWithSizeLimit(MaxRequestBytes)
	return guardedCodec{inner: inner, meta: inner.(remote.MetaDecoder)}
}

const errUnframed = "combo-service takes framed requests only (TTHeader or Framed transport): " +
	"an unframed request's size is known only once it is read"

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

// DecodeMeta reads the transport's header (and the payload's size).
func (g guardedCodec) DecodeMeta(ctx context.Context, msg remote.Message, in remote.ByteBuffer) error {
	return g.meta.DecodeMeta(ctx, msg, in)
}

// DecodePayload checks the payload, then lets Kitex decode it.
func (g guardedCodec) DecodePayload(ctx context.Context, msg remote.Message, in remote.ByteBuffer) error {
	n := msg.PayloadLen()
	if n <= 0 {
		return perrors.NewProtocolErrorWithType(perrors.InvalidData, errUnframed)
	}
	buf, err := in.Peek(n)
	if err != nil {
		return perrors.NewProtocolErrorWithErrMsg(err, "combo-service: read the request: "+err.Error())
	}
	if err := CheckRequest(buf); err != nil {
		return perrors.NewProtocolErrorWithType(perrors.InvalidData, "combo-service: request refused before decoding: "+err.Error())
	}
	return g.meta.DecodePayload(ctx, msg, in)
}

// CheckRequest walks a Thrift binary message (its header and its
// arguments struct) without decoding it: every length must fit in buf,
// lists must hold structs and at most MaxContainerItems items in all,
// struct fields be at most as many, there must be no set and no map, and
// every type byte must be one of Thrift's.
func CheckRequest(buf []byte) error {
	_, _, _, l, err := thrift.Binary.ReadMessageBegin(buf)
	if err != nil {
		return err
	}
	b := budget{items: MaxContainerItems, structs: MaxContainerItems}
	_, err = walk(buf[l:], thrift.STRUCT, maxDepth, &b)
	return err
}

// budget counts down what a request may still hold: items of lists, and
// struct values that are fields (a list's structs are its items).
type budget struct{ items, structs int }

// walk checks one value of type t at the start of b and returns its size.
func walk(b []byte, t thrift.TType, depth int, left *budget) (int, error) {
	if depth == 0 {
		return 0, errors.New("nested too deep")
	}
	switch t {
	case thrift.STRUCT:
		off := 0
		for {
			ft, _, l, err := thrift.Binary.ReadFieldBegin(b[off:])
			if err != nil {
				return 0, err
			}
			off += l
			if ft == thrift.STOP {
				return off, nil
			}
			if ft == thrift.STRUCT {
				if left.structs--; left.structs < 0 {
					return 0, fmt.Errorf("more than %d struct fields in all", MaxContainerItems)
				}
			}
			n, err := walk(b[off:], ft, depth-1, left)
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
		if et != thrift.STRUCT {
			return 0, fmt.Errorf("a list of Thrift type %d: the IDL's lists hold structs", et)
		}
		if left.items -= size; left.items < 0 {
			return 0, fmt.Errorf("lists of more than %d items in all", MaxContainerItems)
		}
		off := l
		for range size {
			n, err := walk(b[off:], et, depth-1, left)
			if err != nil {
				return 0, err
			}
			off += n
		}
		return off, nil
	case thrift.SET, thrift.MAP:
		return 0, fmt.Errorf("a set or map (Thrift type %d): the IDL has none", t)
	case thrift.BOOL, thrift.BYTE, thrift.I16, thrift.I32, thrift.I64, thrift.DOUBLE, thrift.STRING:
		// Skip checks their length against b.
		return thrift.Binary.Skip(b, t)
	default:
		// Any other type byte is not Thrift. Skip must not see it: it
		// indexes a table by the type, a signed byte, so one of 0x80 or
		// more panicked (index out of range); Kitex recovered, but logged
		// a stack trace for every such 20-byte request. The generated
		// code's Skip of an unknown field would panic the same way.
		return 0, fmt.Errorf("a field of Thrift type %d: no such type", t)
	}
}
