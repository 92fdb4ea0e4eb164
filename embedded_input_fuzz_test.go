package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2/server"
)

// Redis's own bounds (PROTO_INLINE_MAX_SIZE, the default proto-max-bulk-len),
// written out here rather than taken from the scanner's constants so that
// a change to those shows.
const (
	redisLineLimit = 64 << 10  // a line, with its CRLF
	redisBulkLimit = 512 << 20 // a bulk string's length
)

// miniredisRead is what miniredis makes of a client's bytes, and where the
// scanner is to cut them.
type miniredisRead struct {
	cmds [][]string // the commands it dispatches, in order, names upper-cased
	bad  error      // what the scanner is to cut at (nil: nothing)
	at   int        // where the line of bad begins; else where miniredis stops reading
	shut bool       // miniredis stops at a protocol error (not at the end of the bytes)
	big  bool       // it allocates more for a bulk string than a test should
}

// readLikeMiniredis reads data as miniredis v2.40.0's readArray and
// readString (server/proto.go) read a client: a line to its '\n', its
// number between its first byte and its last two; a command an array of
// lines (+, -, :) and bulk strings ($<len>, then len bytes and two more,
// whatever they are); anything else, or a number that does not parse,
// ends the connection. What miniredis cannot take it notes in bad instead
// of going on: an array of no elements (Dispatch takes its name from
// args[0]), a bulk length past Redis's (past the int range, too, where it
// allocates length+2), a line past Redis's.
func readLikeMiniredis(data []byte) (m miniredisRead) {
	pos := 0
	// line returns the next line, or false at the end of data or at a
	// line past the limit (m.bad).
	line := func() (string, bool) {
		m.at = pos
		n := bytes.IndexByte(data[pos:], '\n')
		if n < 0 && len(data)-pos > redisLineLimit || n+1 > redisLineLimit {
			m.bad = errLineTooLong
			return "", false
		}
		if n < 0 {
			return "", false
		}
		l := string(data[pos : pos+n+1])
		pos += n + 1
		return l, true
	}
	for {
		l, ok := line()
		if !ok {
			return m
		}
		if len(l) < 3 || l[0] != '*' {
			m.shut = true
			return m
		}
		elems, err := strconv.Atoi(l[1 : len(l)-2])
		if err != nil {
			m.shut = true
			return m
		}
		if elems <= 0 {
			m.bad = errEmptyCommand
			return m
		}
		var cmd []string
		for ; elems > 0; elems-- {
			l, ok := line()
			if !ok {
				return m
			}
			if len(l) < 3 {
				m.shut = true
				return m
			}
			switch l[0] {
			case '+', '-', ':':
				cmd = append(cmd, l[1:len(l)-2])
			case '$':
				n, err := strconv.Atoi(l[1 : len(l)-2])
				if err != nil {
					m.shut = true
					return m
				}
				switch {
				case n > redisBulkLimit:
					m.bad = errBulkTooLong
					return m
				case n > 1<<20:
					m.big = true
				}
				if n < 0 {
					cmd = append(cmd, "")
					continue
				}
				if len(data)-pos < n+2 {
					m.at = len(data)
					return m
				}
				cmd = append(cmd, string(data[pos:pos+n]))
				pos += n + 2
			default:
				m.shut = true
				return m
			}
		}
		cmd[0] = strings.ToUpper(cmd[0])
		m.cmds = append(m.cmds, cmd)
	}
}

// reads splits data into reads of the sizes in sizes, over and over, each
// size a byte plus one; a size of 0 also puts an empty read before it, as
// a net.Conn may return one.
func reads(data, sizes []byte) [][]byte {
	if len(sizes) == 0 {
		return [][]byte{data}
	}
	var rs [][]byte
	for i := 0; len(data) > 0; i++ {
		size := int(sizes[i%len(sizes)])
		if size == 0 {
			rs = append(rs, data[:0])
		}
		n := min(size+1, len(data))
		rs = append(rs, data[:n])
		data = data[n:]
	}
	return rs
}

// scanReads runs a scanner over rs as checkedConn does, and returns the
// bytes it lets through and why it cut there (nil: it did not).
func scanReads(rs [][]byte) (int, error) {
	var s commandScanner
	passed := 0
	for _, r := range rs {
		at, err := s.scan(r)
		if err != nil {
			return passed + at, err
		}
		passed += len(r)
	}
	return passed, nil
}

// serveChecked sends rs, a write each, to miniredis's server through a
// checkedConn, as startEmbedded serves a client, and returns the commands
// it dispatched (none run: a hook takes each) and the cut it was told of.
// Should the scanner let through what crashes miniredis, the process
// ends here.
func serveChecked(rs [][]byte) ([][]string, error) {
	srv := server.NewServerConn()
	var mu sync.Mutex
	var got [][]string
	srv.SetPreHook(func(_ *server.Peer, cmd string, args ...string) bool {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, append([]string{cmd}, args...))
		return true
	})
	client, conn := net.Pipe()
	cut := make(chan error, 1)
	srv.ServeConn(&checkedConn{Conn: conn, cut: func(err error) { cut <- err }})
	for _, r := range rs {
		// A write returns once miniredis has read it all, or errs once
		// it has ended the connection.
		if _, err := client.Write(r); err != nil {
			break
		}
	}
	client.Close()
	srv.Close() // waits for the connection's goroutines to end
	mu.Lock()
	defer mu.Unlock()
	select {
	case err := <-cut:
		return got, err
	default:
		return got, nil
	}
}

// short quotes b, or its first 200 bytes: a failing input may be 64 KB.
func short[B []byte | string](b B) string {
	if len(b) > 200 {
		return fmt.Sprintf("%q... (%d bytes)", b[:200], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// FuzzCommandScannerMatchesMiniredis: for any bytes from a client, split
// into reads any way, the scanner cuts exactly at the first command that
// miniredis would crash on or that is past Redis's limits, and nowhere
// before miniredis stops reading; how the reads split the bytes does not
// change that; and miniredis behind a checkedConn does not crash and
// dispatches every command before the cut, as readLikeMiniredis reads
// them (which this checks against miniredis itself).
func FuzzCommandScannerMatchesMiniredis(f *testing.F) {
	cmd := func(args ...string) string {
		s := fmt.Sprintf("*%d\r\n", len(args))
		for _, a := range args {
			s += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
		}
		return s
	}
	// go-redis's opening of a RESP3 connection with a password, pipelined
	// with its CLIENT SETINFO, then a pipeline of values holding RESP.
	hello := cmd("hello", "3", "auth", "default", "s3cret") +
		cmd("client", "setinfo", "LIB-NAME", "go-redis(,go1.26.0)") +
		cmd("client", "setinfo", "LIB-VER", "9.23.0")
	values := cmd("SET", "k", "a\r\n*0\r\n*-1\r\n$9223372036854775807\r\n") +
		cmd("SET", "e", "") + cmd("GET", "k") + cmd("PING")
	longest := "*1\r\n+" + strings.Repeat("x", redisLineLimit-3) + "\r\n" // a line of just 64 KB
	for _, seed := range []struct {
		data  string
		sizes []byte
	}{
		{hello, nil},
		{hello, []byte{0, 3, 200, 1}},
		{values, nil},
		{values, []byte{2, 0, 6, 17}},
		{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*2\r\n$3\r\nGET\r\n$-1\r\n", []byte{4}},
		{"*2\r\n+ECHO\r\n:12\r\n*2\r\n-echo\r\n+x y\r\n", nil},
		{"*1x\n$4x\nPINGxx", nil},         // miniredis takes the byte before '\n' as the '\r', and after a body any two
		{"*1\r\n$4\r\nPINGxx*0\r\n", nil}, // so a body's last two bytes are not a line's
		{"PING\r\n", nil},                 // no inline commands: miniredis ends the connection
		{"*1\r\n$4\r\nPING\r\nPING\r\n*0\r\n", nil},
		{"*2\r\n$3\r\nGET\r\n*0\r\n*0\r\n", nil}, // an array inside one: refused
		{"*1\r\n$4\r\nPI", []byte{1}},            // ends mid-command
		{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\n", nil},
		{longest, []byte{255}},
		// What crashed miniredis, or Redis cuts.
		{"*0\r\n", nil},
		{"*-1\r\n", []byte{0}},
		{"*+0\r\n", nil},
		{"*00\n", nil},
		{hello + "*-5\r\n", []byte{9, 1}},
		{"*1\r\n$9223372036854775807\r\n", nil},
		{"*2\r\n$3\r\nGET\r\n$9223372036854775806\r\n", []byte{0, 0}},
		{"*1\r\n$536870913\r\n", nil},
		{"*1\r\n+" + strings.Repeat("x", redisLineLimit-2) + "\r\n", nil},
		{"*1\r\n+" + strings.Repeat("x", redisLineLimit), []byte{100}},
	} {
		f.Add([]byte(seed.data), seed.sizes)
	}
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		want := readLikeMiniredis(data)
		whole, err := scanReads([][]byte{data})
		switch {
		case want.bad != nil:
			if !errors.Is(err, want.bad) || whole != want.at {
				t.Fatalf("cut %d bytes in, for %v; want at %d, for %v (%s)", whole, err, want.at, want.bad, short(data))
			}
		case err != nil && !(want.shut && whole >= want.at):
			t.Fatalf("cut %d bytes in, for %v; want no cut before miniredis stops reading at %d (%s)", whole, err, want.at, short(data))
		}
		// However the reads split the bytes, the same verdict, let
		// through at most the bad line's bytes before its '\n'.
		rs := reads(data, sizes)
		splits := [][][]byte{rs}
		if len(data) <= 4096 {
			splits = append(splits, reads(data, []byte{0}))
		}
		for _, split := range splits {
			passed, splitErr := scanReads(split)
			if splitErr != err || (err == nil) != (passed == len(data)) ||
				(err != nil && (passed < whole || bytes.IndexByte(data[whole:passed], '\n') >= 0)) {
				t.Fatalf("in %d reads: cut %d bytes in, for %v; in one read: %d, for %v (%s)", len(split), passed, splitErr, whole, err, short(data))
			}
		}
		if want.big {
			return // miniredis allocates a bulk string's length before it reads it
		}
		// miniredis gets the same writes, up to a few hundred (each a round
		// trip between goroutines: a 64 KB line a byte a write took the
		// fuzzer seconds), then the rest at once.
		if len(rs) > 256 {
			sent := 0
			for _, r := range rs[:255] {
				sent += len(r)
			}
			rs = append(rs[:255:255], data[sent:])
		}
		got, cut := serveChecked(rs)
		if !slices.EqualFunc(got, want.cmds, slices.Equal) {
			t.Fatalf("miniredis dispatched %s, want %s (%s)", short(fmt.Sprint(got)), short(fmt.Sprint(want.cmds)), short(data))
		}
		if (want.bad != nil || !want.shut) && cut != want.bad {
			t.Fatalf("checkedConn cut for %v, want %v (%s)", cut, want.bad, short(data))
		}
	})
}
