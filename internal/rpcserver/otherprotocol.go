package rpcserver

import (
	"bytes"
	"encoding/binary"

	"github.com/cloudwego/kitex/pkg/remote"
)

// refusedProtocol names the Thrift protocol or transport a request Kitex
// refused was sent in, from its first bytes, when it is one another Thrift
// stack speaks and Kitex does not: Apache Thrift's and fbthrift's clients
// default to some; or an HTTP request. Kitex's refusal says only "invalid payload
// (first4Bytes=…)", and the caller sees its connection end with no answer,
// so the log is where its team learns what to change. "" when the bytes
// are none of them (TLS, noise).
func refusedProtocol(b []byte) string {
	const takes = ": combo-service takes Thrift Binary (strict), Framed or in Kitex's TTHeader"
	word := func(i int) uint32 { return binary.BigEndian.Uint32(b[i : i+4]) }
	switch {
	case len(b) >= 1 && b[0] == 0x82: // Compact's protocol id (past a TTHeader Kitex read, or unframed)
		return "a Thrift Compact request (unframed, or in a TTHeader)" + takes
	case len(b) >= 5 && b[4] == 0x82:
		return "a Framed Thrift Compact request" + takes
	case len(b) >= 6 && b[4] == 0x0f && b[5] == 0xff:
		return "an Apache or fbthrift THeader request (magic 0x0FFF; Kitex's TTHeader is 0x1000)" + takes
	case len(b) >= 8 && word(4) >= 1 && word(4) <= 255 && word(0) >= 4+word(4) && word(0) <= MaxRequestBytes:
		// A frame's length, then a method name's: no version word.
		return "a Framed non-strict Thrift Binary request (no version word)" + takes
	case len(b) >= 8 && word(0) >= 1 && word(0) <= 255 && methodChars(b[4:8]):
		return "an unframed non-strict Thrift Binary request (no version word)" + takes
	case httpRequest(b):
		// A probe or scraper given server.addr: one such line a scrape.
		return "an HTTP request (combo-service serves Thrift on server.addr; /metrics, /healthz and /readyz are on metrics.addr)"
	}
	return ""
}

// httpRequest reports whether b starts an HTTP/1 request (Kitex read 8
// bytes before refusing it, room for the longest method and its space).
func httpRequest(b []byte) bool {
	for _, m := range []string{"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH "} {
		if bytes.HasPrefix(b, []byte(m)) {
			return true
		}
	}
	return false
}

// methodChars reports whether b could start a method name.
func methodChars(b []byte) bool {
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == ':' || c == '.') {
			return false
		}
	}
	return true
}

// firstBytes are up to 8 of in's bytes already read, without waiting for
// more.
func firstBytes(in remote.ByteBuffer) []byte {
	n := min(8, in.ReadableLen())
	if n <= 0 {
		return nil
	}
	b, err := in.Peek(n)
	if err != nil {
		return nil
	}
	return b
}
